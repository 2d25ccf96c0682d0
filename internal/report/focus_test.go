package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/cost"
)

// TestFOCUSAddsUp reads WriteFOCUS back: BilledCost adds up to the rows'
// cost plus the unshared idle pool, x_idle_share to the shared pool, every
// line's ListCost is PricingQuantity × ListUnitPrice, the four costs agree,
// and Tags is null or a JSON object.
func TestFOCUSAddsUp(t *testing.T) {
	usage, gpus := randomLedger(11, 150)
	for _, basis := range []string{cost.BasisAllocated, cost.BasisUsed} {
		for _, idle := range []string{cost.IdleNone, cost.IdleWeighted, cost.IdleEven} {
			t.Run(basis+"/"+idle, func(t *testing.T) {
				m := randomModel()
				m.Basis, m.Idle = basis, idle
				r, err := Build(usage, gpus, Options{By: ByTeam, From: from, To: from.Add(24 * time.Hour), Cost: m})
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				if err := r.WriteFOCUS(&b); err != nil {
					t.Fatal(err)
				}
				recs, err := csv.NewReader(&b).ReadAll()
				if err != nil {
					t.Fatal(err)
				}
				head := recs[0]
				col := func(rec []string, name string) string {
					i := slices.Index(head, name)
					if i < 0 {
						t.Fatalf("no column %s", name)
					}
					return rec[i]
				}
				f := func(rec []string, name string) float64 {
					v, err := strconv.ParseFloat(col(rec, name), 64)
					if err != nil {
						t.Fatalf("line %v: %s: %v", rec, name, err)
					}
					return v
				}
				var billed, share float64
				for _, rec := range recs[1:] {
					c := f(rec, "BilledCost")
					billed += c
					share += f(rec, "x_idle_share")
					for _, other := range []string{"EffectiveCost", "ListCost", "ContractedCost"} {
						if f(rec, other) != c {
							t.Errorf("%s %v ≠ BilledCost %v", other, f(rec, other), c)
						}
					}
					if want := f(rec, "PricingQuantity") * f(rec, "ListUnitPrice"); math.Abs(c-want) > 1e-9*max(1, c) {
						t.Errorf("%s: ListCost %v, want PricingQuantity × ListUnitPrice = %v", col(rec, "ChargeDescription"), c, want)
					}
					if col(rec, "ChargeCategory") != "Usage" || col(rec, "ChargeClass") != "" {
						t.Errorf("ChargeCategory %q, ChargeClass %q", col(rec, "ChargeCategory"), col(rec, "ChargeClass"))
					}
					if tags := col(rec, "Tags"); tags != "" {
						var obj map[string]string
						if err := json.Unmarshal([]byte(tags), &obj); err != nil {
							t.Errorf("Tags %q: %v", tags, err)
						}
					}
					for _, ts := range []string{"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"} {
						if _, err := time.Parse("2006-01-02T15:04:05Z", col(rec, ts)); err != nil {
							t.Errorf("%s: %v", ts, err)
						}
					}
				}
				want := r.Totals.Cost
				if !r.Idle.Shared {
					want += r.Idle.Cost
				}
				if math.Abs(billed-want) > 1e-9*want {
					t.Errorf("Σ BilledCost %v, want rows %v + unshared idle = %v", billed, r.Totals.Cost, want)
				}
				if r.Idle.Shared && math.Abs(share-r.Idle.Cost) > 1e-9*r.Idle.Cost {
					t.Errorf("Σ x_idle_share %v, want idle cost %v", share, r.Idle.Cost)
				}
				if basis == cost.BasisAllocated && math.Abs(billed-r.Host.Cost) > 1e-9*r.Host.Cost {
					t.Errorf("Σ BilledCost %v, want the host's %v", billed, r.Host.Cost)
				}
			})
		}
	}
}

// TestFOCUSIdleShareOfEnergy: when the idle pool holds energy only (every
// GPU held all the time), each share's ConsumedQuantity is metered kWh, as
// on the energy lines, and its PricingQuantity those kWh times PUE.
func TestFOCUSIdleShareOfEnergy(t *testing.T) {
	usage, gpus := fixture()
	for i := range gpus {
		gpus[i].AllocatedSeconds += gpus[i].IdleSeconds
		gpus[i].IdleSeconds = 0
	}
	m := prices()
	m.Idle = cost.IdleWeighted
	r, err := Build(usage, gpus, Options{By: ByUser, From: from, To: to, Cost: m})
	if err != nil {
		t.Fatal(err)
	}
	if r.Idle.GPUHours != 0 || r.Idle.EnergyKWh == 0 || !r.Idle.Shared {
		t.Fatalf("idle %+v, want energy only, shared", r.Idle)
	}
	var b bytes.Buffer
	if err := r.WriteFOCUS(&b); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	head := recs[0]
	col := func(rec []string, name string) string { return rec[slices.Index(head, name)] }
	f := func(rec []string, name string) float64 {
		v, err := strconv.ParseFloat(col(rec, name), 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	var consumed float64
	n := 0
	for _, rec := range recs[1:] {
		if col(rec, "ServiceName") != "GPU Idle Pool" {
			continue
		}
		n++
		if u := col(rec, "ConsumedUnit"); u != "Kilowatt-Hours" {
			t.Errorf("ConsumedUnit %q, want Kilowatt-Hours", u)
		}
		if got, want := f(rec, "PricingQuantity"), f(rec, "ConsumedQuantity")*1.5; math.Abs(got-want) > 1e-9 {
			t.Errorf("PricingQuantity %v, want ConsumedQuantity × PUE = %v", got, want)
		}
		consumed += f(rec, "ConsumedQuantity")
	}
	if n == 0 {
		t.Fatal("no idle share lines")
	}
	if math.Abs(consumed-r.Idle.EnergyKWh) > 1e-9 {
		t.Errorf("Σ ConsumedQuantity of the shares %v, want the pool's metered %v kWh", consumed, r.Idle.EnergyKWh)
	}
}
