package exporter

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/cost"
)

// testPrices name a model the node does not have and a default that the
// node's H100s fall back to.
var testPrices = cost.Model{
	Currency: "EUR",
	GPUHour:  map[string]float64{"default": 2.5, "NVIDIA A100-SXM4-80GB": 1.75},
	KWh:      0.2, CPUCoreHour: 0.04, PUE: 1.3,
}

func TestRenderPrices(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 2)
	got := string(RenderPrices(nil, s.Latest(), testPrices))
	want := `# HELP gpumeter_price_gpu_hour Price of one GPU-hour by GPU model, from the cost section: a model priced by the default entry shows that price under its own name, and model="default" is the default entry itself.
# TYPE gpumeter_price_gpu_hour gauge
gpumeter_price_gpu_hour{Hostname="lab-1",currency="EUR",model="NVIDIA A100-SXM4-80GB"} 1.75
gpumeter_price_gpu_hour{Hostname="lab-1",currency="EUR",model="NVIDIA H100 80GB HBM3"} 2.5
gpumeter_price_gpu_hour{Hostname="lab-1",currency="EUR",model="default"} 2.5
# HELP gpumeter_price_kwh Price of one kWh drawn from the grid, from the cost section; the grid draws PUE times what a GPU meters.
# TYPE gpumeter_price_kwh gauge
gpumeter_price_kwh{Hostname="lab-1",currency="EUR"} 0.2
# HELP gpumeter_price_cpu_core_hour Price of one CPU core-hour, from the cost section.
# TYPE gpumeter_price_cpu_core_hour gauge
gpumeter_price_cpu_core_hour{Hostname="lab-1",currency="EUR"} 0.04
# HELP gpumeter_price_pue Power usage effectiveness the cost section charges energy with (1 when unset).
# TYPE gpumeter_price_pue gauge
gpumeter_price_pue{Hostname="lab-1"} 1.3
`
	if got != want {
		t.Errorf("RenderPrices:\n%s", lineDiff(want, got))
	}
	if _, err := textGatherer(got).Gather(); err != nil {
		t.Errorf("not valid exposition: %v", err)
	}
}

// A price list without prices serves no price series: not zeros that a
// cost panel would chart as free.
func TestRenderPricesUnset(t *testing.T) {
	s := playScenario(t, "../../testdata/shared.yaml", 2)
	if got := RenderPrices(nil, s.Latest(), cost.Model{}); len(got) != 0 {
		t.Errorf("no prices rendered:\n%s", got)
	}
	if got := RenderPrices(nil, nil, testPrices); len(got) != 0 {
		t.Errorf("before the first tick rendered:\n%s", got)
	}
}
