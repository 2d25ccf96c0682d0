package cost

import (
	"math"
	"strings"
	"testing"
)

// Two GPU models the ledgers of the tests know.
const (
	a100 = "NVIDIA A100-SXM4-80GB"
	h100 = "NVIDIA H100 80GB HBM3"
)

func TestValidate(t *testing.T) {
	known := []string{a100, h100}
	tests := []struct {
		name  string
		model Model
		known []string
		want  []string // substrings of the error; none for no error
	}{
		{name: "zero", model: Model{}},
		{name: "full", model: Model{Currency: "EUR", GPUHour: map[string]float64{a100: 2, DefaultPrice: 1},
			CPUCoreHour: 0.1, RAMGBHour: 0.1, KWh: 0.2, PUE: 1.2, Basis: BasisUsed, Idle: IdleEven,
			Weights: map[string]float64{WeightGPU: 1, WeightCPU: 0.5, WeightRAM: 0, WeightEnergy: 2}}, known: known},
		{name: "unknown model", model: Model{GPUHour: map[string]float64{"NVIDIA A100": 2, DefaultPrice: 1}},
			known: known, want: []string{`unknown GPU model "NVIDIA A100"`}},
		{name: "any model when none known", model: Model{GPUHour: map[string]float64{"NVIDIA A100": 2}}},
		{name: "negative prices", model: Model{GPUHour: map[string]float64{a100: -1}, CPUCoreHour: -1, RAMGBHour: -1, KWh: -1},
			want: []string{`GPU-hour price of "` + a100 + `" is -1`, "CPU core-hour price is -1", "RAM GiB-hour price is -1", "kWh price is -1"}},
		{name: "not a number", model: Model{KWh: math.NaN(), CPUCoreHour: math.Inf(1)}, want: []string{"kWh price is NaN", "CPU core-hour price is +Inf"}},
		{name: "PUE", model: Model{PUE: 0.9}, want: []string{"PUE is 0.9"}},
		{name: "basis", model: Model{Basis: "held"}, want: []string{`unknown cost basis "held"`}},
		{name: "idle", model: Model{Idle: "shared"}, want: []string{`unknown idle policy "shared"`}},
		{name: "weights", model: Model{Weights: map[string]float64{"gpus": 1, WeightCPU: -2}},
			want: []string{`weight of "cpu" is -2`, `unknown weight "gpus"`}},
		{name: "currency", model: Model{Currency: "usd"}, want: []string{`currency "usd"`}},
		{name: "empty model", model: Model{GPUHour: map[string]float64{"": 1}}, want: []string{"empty model name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.model.Validate(tt.known)
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate: %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v, want it to say %q", err, w)
				}
			}
		})
	}
}
