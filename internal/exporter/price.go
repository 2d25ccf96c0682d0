package exporter

import (
	"maps"
	"slices"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

var (
	famPriceGPU = family{"gpumeter_price_gpu_hour", "Price of one GPU-hour by GPU model, from the cost section: a model priced by the default entry shows that price under its own name, and model=\"default\" is the default entry itself.", "gauge"}
	famPriceKWh = family{"gpumeter_price_kwh", "Price of one kWh drawn from the grid, from the cost section; the grid draws PUE times what a GPU meters.", "gauge"}
	famPriceCPU = family{"gpumeter_price_cpu_core_hour", "Price of one CPU core-hour, from the cost section.", "gauge"}
	famPriceRAM = family{"gpumeter_price_ram_gib_hour", "Price of one GiB of RAM held for an hour, from the cost section.", "gauge"}
	famPUE      = family{"gpumeter_price_pue", "Power usage effectiveness the cost section charges energy with (1 when unset).", "gauge"}
)

// RenderPrices appends the price list's series, labelled with the tick's
// node and the currency, in the text exposition format to b. GPU-hour
// prices come for every model the list names and every model of the
// tick's GPUs, each at the price a report charges before weights, so that
// a GPU's cost can be charted by joining on its model. A price the list
// does not set (0) has no series, and a list without GPU-hour prices none
// of those; a nil tick renders nothing.
func RenderPrices(b []byte, t *sampler.Tick, m cost.Model) []byte {
	if t == nil || t.Tick == nil {
		return b
	}
	m = m.WithDefaults()
	w := writer{b: b}
	node := t.Node
	if len(m.GPUHour) > 0 {
		models := slices.Collect(maps.Keys(m.GPUHour))
		for i := range t.Sample.Devices {
			if d := &t.Sample.Devices[i]; d.Err == nil && d.Model != "" {
				models = append(models, d.Model)
			}
		}
		slices.Sort(models)
		models = slices.Compact(models)
		w.family(famPriceGPU)
		for _, model := range models {
			w.sample(famPriceGPU.name, w.labels(nil, "Hostname", node, "currency", m.Currency, "model", model), m.GPUPrice(model))
		}
	}
	nodeCurrency := w.labels(nil, "Hostname", node, "currency", m.Currency)
	for _, p := range []struct {
		family
		v float64
	}{{famPriceKWh, m.KWh}, {famPriceCPU, m.CPUCoreHour}, {famPriceRAM, m.RAMGBHour}} {
		if p.v > 0 {
			w.family(p.family)
			w.sample(p.name, nodeCurrency, p.v)
		}
	}
	if m.KWh > 0 {
		w.family(famPUE)
		w.sample(famPUE.name, w.labels(nil, "Hostname", node), m.PUE)
	}
	return w.b
}
