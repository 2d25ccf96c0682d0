// Package cost is the cost model: the config's price list (per GPU-hour
// by model, per CPU core-hour, per RAM GiB-hour, per kWh with PUE), which
// GPU-hours are charged, how the idle pool is shared and the billing
// weights, with the checks a price list must pass. The report, the waste
// rules and the agent charge by it; the report package says how a
// report's rows and idle pool are costed.
package cost

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gpumeter/gpumeter/internal/config"
)

// Cost bases: which GPU-hours a row is charged for.
const (
	BasisAllocated = "allocated" // the GPUs a container held (the default)
	BasisPresent   = "present"   // the time an owner had a process on the GPU
	BasisUsed      = "used"      // SM-weighted GPU-hours
)

// Idle pool policies.
const (
	IdleNone     = "none"     // the pool is its own line (the default)
	IdleWeighted = "weighted" // shared by allocated GPU cost
	IdleEven     = "even"     // shared evenly among rows with GPU use
)

// Resource names for Model.Weights.
const (
	WeightGPU    = "gpu"
	WeightCPU    = "cpu"
	WeightRAM    = "ram"
	WeightEnergy = "energy"
)

// DefaultPrice is the Model.GPUHour key whose price applies to models
// not listed.
const DefaultPrice = "default"

// Model prices resources: the fields are the config's (config.Cost). Its
// zero value prices everything at 0 in USD, on the allocated basis, with
// the idle pool not shared: "" stands for USD, BasisAllocated and
// IdleNone, and a PUE of 0 for 1.
type Model config.Cost

// ErrInvalidCost marks an error that comes from the price list rather than
// the ledger; callers wrap the errors of Validate and Check in it where
// the two must be told apart.
var ErrInvalidCost = errors.New("invalid cost model")

// Validate reports every error in the model: negative or non-finite
// prices and weights, PUE below 1, an unknown basis, idle policy, weight
// name or currency code, and, when knownModels is not empty, a price for a
// GPU model not in it (a misspelt model would silently fall back to the
// default price).
func (m Model) Validate(knownModels []string) error {
	var errs []error
	if m.Currency != "" && !isCurrency(m.Currency) {
		errs = append(errs, fmt.Errorf("currency %q is not an ISO 4217 code (three capital letters)", m.Currency))
	}
	known := make(map[string]bool, len(knownModels))
	for _, k := range knownModels {
		known[k] = true
	}
	for _, model := range slices.Sorted(maps.Keys(m.GPUHour)) {
		p := m.GPUHour[model]
		switch {
		case model == "":
			errs = append(errs, errors.New("GPU-hour price for an empty model name"))
		case !price(p):
			errs = append(errs, fmt.Errorf("GPU-hour price of %q is %v, want a finite number ≥ 0", model, p))
		case len(knownModels) > 0 && model != DefaultPrice && !known[model]:
			errs = append(errs, fmt.Errorf("GPU-hour price for unknown GPU model %q (known: %s)", model, strings.Join(knownModels, ", ")))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"CPU core-hour", m.CPUCoreHour}, {"RAM GiB-hour", m.RAMGBHour}, {"kWh", m.KWh}} {
		if !price(f.v) {
			errs = append(errs, fmt.Errorf("%s price is %v, want a finite number ≥ 0", f.name, f.v))
		}
	}
	if m.PUE != 0 && (!price(m.PUE) || m.PUE < 1) {
		errs = append(errs, fmt.Errorf("PUE is %v, want at least 1 (0 means 1)", m.PUE))
	}
	switch m.Basis {
	case "", BasisAllocated, BasisPresent, BasisUsed:
	default:
		errs = append(errs, fmt.Errorf("unknown cost basis %q (want %s, %s or %s)", m.Basis, BasisAllocated, BasisPresent, BasisUsed))
	}
	switch m.Idle {
	case "", IdleNone, IdleWeighted, IdleEven:
	default:
		errs = append(errs, fmt.Errorf("unknown idle policy %q (want %s, %s or %s)", m.Idle, IdleNone, IdleWeighted, IdleEven))
	}
	for _, name := range slices.Sorted(maps.Keys(m.Weights)) {
		w := m.Weights[name]
		switch name {
		case WeightGPU, WeightCPU, WeightRAM, WeightEnergy:
			if !price(w) {
				errs = append(errs, fmt.Errorf("weight of %q is %v, want a finite number ≥ 0", name, w))
			}
		default:
			errs = append(errs, fmt.Errorf("unknown weight %q (want %s, %s, %s or %s)", name, WeightGPU, WeightCPU, WeightRAM, WeightEnergy))
		}
	}
	return errors.Join(errs...)
}

// Check validates the model against the GPU models known where it
// prices: each of lists (the models a ledger metered, those a node's GPUs
// are now) may be empty, and they are merged. With none known it checks
// the prices alone; see Validate.
func (m Model) Check(lists ...[]string) error {
	var known []string
	for _, l := range lists {
		for _, model := range l {
			if model != "" && !slices.Contains(known, model) {
				known = append(known, model)
			}
		}
	}
	slices.Sort(known)
	return m.Validate(known)
}

func price(v float64) bool { return v >= 0 && !math.IsInf(v, 0) } // NaN fails v >= 0

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// GPUPrice is the price of one GPU-hour of model: its own, else the
// default price, else 0.
func (m Model) GPUPrice(model string) float64 {
	if p, ok := m.GPUHour[model]; ok {
		return p
	}
	return m.GPUHour[DefaultPrice]
}

// GPUHourCost is what one GPU-hour of model costs as a report charges it:
// the model's price (else the default price) times the GPU weight.
func (m Model) GPUHourCost(model string) float64 {
	return m.Weight(WeightGPU) * m.GPUPrice(model)
}

// Weight is the billing weight of the resource name, 1 when none is set.
func (m Model) Weight(name string) float64 {
	if w, ok := m.Weights[name]; ok {
		return w
	}
	return 1
}

// WithDefaults is m with what its empty fields stand for filled in.
func (m Model) WithDefaults() Model {
	if m.Currency == "" {
		m.Currency = "USD"
	}
	if m.PUE == 0 {
		m.PUE = 1
	}
	if m.Basis == "" {
		m.Basis = BasisAllocated
	}
	if m.Idle == "" {
		m.Idle = IdleNone
	}
	return m
}
