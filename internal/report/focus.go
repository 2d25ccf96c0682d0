package report

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// focusHeader are the columns of WriteFOCUS: the FOCUS 1.2 columns gpumeter
// can fill, in the specification's (alphabetical) order, then custom
// columns, which FOCUS requires to start with "x_".
//
// How the mandatory columns are filled:
//
//	BilledCost, ContractedCost,   the line's cost; there are no discounts
//	  EffectiveCost, ListCost       or commitments, so all four are equal
//	BillingAccountId, -Name       the node the charge arose on
//	BillingCurrency               cost.Model.Currency
//	BillingPeriodStart, -End      the report window (From, To)
//	ChargePeriodStart, -End       the report window (From, To)
//	ChargeCategory                "Usage"
//	ChargeClass                   null: nothing is a correction
//	ChargeDescription             what was charged, in words
//	InvoiceIssuerName,            "gpumeter"
//	  ProviderName, PublisherName
//	PricingQuantity, PricingUnit  charged quantity: GPU-Hours on the cost
//	                                basis, Kilowatt-Hours times PUE,
//	                                Core-Hours, GiB-Hours
//	ServiceCategory,              GPU, GPU energy and idle pool: "AI and
//	  ServiceSubcategory,           Machine Learning" / "Machine Learning";
//	  ServiceName                   CPU and RAM: "Compute" / "Containers";
//	                                ServiceName names the resource
//
// and the conditional ones gpumeter has:
//
//	ConsumedQuantity, -Unit       metered quantity: charged GPU-hours
//	                                ("GPU-Hours"), kWh before PUE,
//	                                core-hours, GiB-hours
//	ListUnitPrice,                weighted unit price; ListCost is
//	  ContractedUnitPrice           PricingQuantity times it
//	PricingCategory               "Standard"
//	ChargeFrequency               "Usage-Based"
//	ResourceId                    container ID; "<node>/host/<user>" for
//	                                host processes, "<node>/unattributed",
//	                                and the GPU UUID for idle lines
//	ResourceName, ResourceType    container name / "Container", user name /
//	                                "Host Process", "(unattributed)" /
//	                                "Unattributed", "<node>/<index> <model>"
//	                                / "GPU"
//	SubAccountId, -Name           the report row's key (Options.By); "(idle)"
//	                                for the idle pool
//	Tags                          the container's labels as a JSON object;
//	                                null for other owners
//
// The custom columns: x_gpu_hours_used (GPU lines), x_energy_kwh (energy
// lines), x_idle_share, whose the line is (x_user, x_team, x_project),
// where (x_node, x_gpu, x_gpu_model), and x_gpu_hours_held (GPU lines:
// the GPU time the record held, not split among holders; empty where the
// ledger has none). Columns added later go at the end.
var focusHeader = []string{
	"BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
	"BillingPeriodEnd", "BillingPeriodStart",
	"ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
	"ChargePeriodEnd", "ChargePeriodStart",
	"ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice",
	"EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
	"PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
	"ResourceId", "ResourceName", "ResourceType",
	"ServiceCategory", "ServiceName", "ServiceSubcategory",
	"SubAccountId", "SubAccountName", "Tags",
	"x_gpu_hours_used", "x_energy_kwh", "x_idle_share",
	"x_user", "x_team", "x_project", "x_node", "x_gpu", "x_gpu_model",
	"x_gpu_hours_held",
}

const focusIssuer = "gpumeter"

// focusLine is one FOCUS row before formatting.
type focusLine struct {
	cost                     float64
	account                  string // node
	description              string
	consumed, priced         float64
	consumedUnit, pricedUnit string
	unitPrice                float64
	resourceID, resourceName string
	resourceType             string
	category, service, sub   string
	subAccount               string
	tags                     string
	gpuUsed, kWh, gpuHeld    string // x_gpu_hours_used, x_energy_kwh, x_gpu_hours_held
	idleShare                float64
	user, team, project      string
	gpu                      ledger.GPU
}

// WriteFOCUS writes the report as a FOCUS 1.2 cost and usage CSV: per
// ledger record the report kept, one line per charged resource (GPU,
// energy, CPU, RAM) and one for its share of the idle pool; then, when the
// pool is not shared and no filter applied, one GPU and one energy line
// per GPU for the idle pool itself. BilledCost then adds up to the rows'
// cost plus the unshared idle pool. Lines of zero quantity and cost are
// left out. It needs a Report from Build.
func (r *Report) WriteFOCUS(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(focusHeader)
	from, to := focusTime(r.From), focusTime(r.To)
	write := func(f *focusLine) {
		cw.Write([]string{
			num(f.cost), f.account, f.account, r.Currency,
			to, from,
			"Usage", "", f.description, "Usage-Based",
			to, from,
			num(f.consumed), f.consumedUnit, num(f.cost), num(f.unitPrice),
			num(f.cost), focusIssuer, num(f.cost), num(f.unitPrice),
			"Standard", num(f.priced), f.pricedUnit, focusIssuer, focusIssuer,
			f.resourceID, f.resourceName, f.resourceType,
			f.category, f.service, f.sub,
			f.subAccount, f.subAccount, f.tags,
			f.gpuUsed, f.kWh, num(f.idleShare),
			f.user, f.team, f.project, f.gpu.Node, f.gpu.UUID, f.gpu.Model,
			f.gpuHeld,
		})
	}
	const (
		aiml, ml        = "AI and Machine Learning", "Machine Learning"
		compute, ctrs   = "Compute", "Containers"
		gpuHours, cores = "GPU-Hours", "Core-Hours"
		kWhs, gibHours  = "Kilowatt-Hours", "GiB-Hours"
	)
	for _, i := range r.kept {
		l := &r.lines[i]
		u := l.u
		base := r.owner(l)
		if l.charged != 0 || l.gpu != 0 {
			f := base
			f.description = fmt.Sprintf("GPU-hours %s on %s", r.Basis, modelName(u.GPU.Model))
			f.consumed, f.priced, f.consumedUnit, f.pricedUnit = l.charged, l.charged, gpuHours, gpuHours
			f.unitPrice, f.cost = l.gpuPrice, l.gpu
			f.category, f.service, f.sub = aiml, "GPU", ml
			f.gpuUsed = num(u.UsedSeconds / secondsPerHour)
			if !u.Unheld.All {
				f.gpuHeld = num(u.HeldSeconds / secondsPerHour)
			}
			write(&f)
		}
		if kWh := u.EnergyJoules / joulesPerKWh; kWh != 0 || l.energy != 0 {
			f := base
			f.description = fmt.Sprintf("GPU energy on %s at PUE %s", modelName(u.GPU.Model), num(r.pue))
			f.consumed, f.priced, f.consumedUnit, f.pricedUnit = kWh, kWh*r.pue, kWhs, kWhs
			f.cost, f.unitPrice = l.energy, r.unit.kWh
			f.category, f.service, f.sub = aiml, "GPU Energy", ml
			f.kWh = num(kWh)
			write(&f)
		}
		if h := u.CPUSeconds / secondsPerHour; h != 0 || l.cpu != 0 {
			f := base
			f.description = "Container CPU core-hours"
			f.consumed, f.priced, f.consumedUnit, f.pricedUnit = h, h, cores, cores
			f.cost, f.unitPrice = l.cpu, r.unit.cpu
			f.category, f.service, f.sub = compute, "Container CPU", ctrs
			f.gpu = ledger.GPU{Node: u.Node}
			write(&f)
		}
		if h := u.RAMByteSeconds / bytesPerGiB / secondsPerHour; h != 0 || l.ram != 0 {
			f := base
			f.description = "Container memory GiB-hours"
			f.consumed, f.priced, f.consumedUnit, f.pricedUnit = h, h, gibHours, gibHours
			f.cost, f.unitPrice = l.ram, r.unit.ram
			f.category, f.service, f.sub = compute, "Container Memory", ctrs
			f.gpu = ledger.GPU{Node: u.Node}
			write(&f)
		}
		if l.idle != 0 {
			// The share is a fraction of the pool; its quantity is that
			// fraction of the pool's GPU-hours (of its kWh when the pool
			// holds energy only), at the pool's average price.
			f := base
			frac := l.idle / r.Idle.Cost
			f.description = fmt.Sprintf("Share of the idle GPU pool (%s)", r.IdlePolicy)
			f.consumed, f.consumedUnit = frac*r.Idle.GPUHours, gpuHours
			f.priced, f.pricedUnit = f.consumed, f.consumedUnit
			if r.Idle.GPUHours == 0 {
				// Metered kWh, priced as drawn (PUE), as energy lines are.
				f.consumed, f.consumedUnit = frac*r.Idle.EnergyKWh, kWhs
				f.priced, f.pricedUnit = f.consumed*r.pue, kWhs
			}
			f.cost, f.idleShare = l.idle, l.idle
			if f.priced != 0 {
				f.unitPrice = l.idle / f.priced
			}
			f.category, f.service, f.sub = aiml, "GPU Idle Pool", ml
			f.gpu = ledger.GPU{Node: u.Node}
			write(&f)
		}
	}
	if !r.Idle.Shared && !r.Filtered {
		for _, il := range r.idleGPU {
			base := focusLine{
				account:      il.gpu.Node,
				resourceID:   il.gpu.UUID,
				resourceName: gpuName(il.gpu),
				resourceType: "GPU",
				category:     aiml, service: "GPU Idle Pool", sub: ml,
				subAccount: "(idle)",
				gpu:        il.gpu,
			}
			if il.hours != 0 || il.costGPU != 0 {
				f := base
				f.description = "Idle GPU-hours nobody held on " + modelName(il.gpu.Model)
				f.consumed, f.priced, f.consumedUnit, f.pricedUnit = il.hours, il.hours, gpuHours, gpuHours
				f.unitPrice, f.cost = il.price, il.costGPU
				write(&f)
			}
			if il.kWh != 0 || il.costEn != 0 {
				f := base
				f.description = "GPU energy booked to nobody at PUE " + num(r.pue)
				f.consumed, f.priced, f.consumedUnit, f.pricedUnit = il.kWh, il.kWh*r.pue, kWhs, kWhs
				f.cost, f.unitPrice = il.costEn, r.unit.kWh
				f.kWh = num(il.kWh)
				write(&f)
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// owner fills the columns that say whose a record is.
func (r *Report) owner(l *line) focusLine {
	u := l.u
	f := focusLine{account: u.Node, subAccount: l.key, gpu: u.GPU}
	f.gpu.Node = u.Node
	switch u.OwnerKind {
	case ledger.KindContainer:
		f.resourceID, f.resourceType, f.tags = u.OwnerID, "Container", "{}"
		f.resourceName = containerName(u)
		if c := u.Container; c != nil {
			f.user, f.team, f.project = c.User, c.Team, c.Project
			if len(c.Labels) > 0 {
				b, _ := json.Marshal(c.Labels) // sorted keys; strings always marshal
				f.tags = string(b)
			}
		}
	case ledger.KindHost:
		f.resourceID, f.resourceName, f.resourceType = u.Node+"/host/"+u.OwnerID, u.OwnerID, "Host Process"
		f.user = u.OwnerID
	default:
		f.resourceID, f.resourceName, f.resourceType = u.Node+"/unattributed", KeyUnattributed, "Unattributed"
	}
	return f
}

func modelName(m string) string { return cmp.Or(m, "an unknown GPU model") }

// focusTime formats a time as FOCUS wants it: UTC, to the second, with Z.
func focusTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }
