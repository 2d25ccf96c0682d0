package agent

import "github.com/gpumeter/gpumeter/internal/config"

// The demo's prices, charged when the config sets none, so that the
// demo's first report, its page and its waste findings show money: round
// figures in the range of 2026 cloud list prices, not a quote. README
// lists them.
const (
	demoGPUHour     = 2.50  // per GPU-hour, any model
	demoKWh         = 0.15  // per kWh
	demoCPUCoreHour = 0.04  // per core-hour
	demoRAMGBHour   = 0.005 // per GiB-hour
)

// withDemoPrices returns c with the demo's prices when c prices nothing;
// prices an operator set are kept as they are.
func withDemoPrices(c config.Cost) config.Cost {
	if len(c.GPUHour) > 0 || c.KWh != 0 || c.CPUCoreHour != 0 || c.RAMGBHour != 0 {
		return c
	}
	c.GPUHour = map[string]float64{"default": demoGPUHour}
	c.KWh, c.CPUCoreHour, c.RAMGBHour = demoKWh, demoCPUCoreHour, demoRAMGBHour
	return c
}
