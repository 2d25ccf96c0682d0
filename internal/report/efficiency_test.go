package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// TestEfficiencyTimeSliced: two containers share one GPU for 2 h, each
// allocated half of it and holding all of it. train uses 90 % of the
// GPU, 1.8 GPU-hours: 180 % of its allocated hour, 90 % of its 2 held
// hours. Efficiency is the latter.
func TestEfficiencyTimeSliced(t *testing.T) {
	g := ledger.GPU{Node: "gpu1", UUID: "GPU-00000000-aaaa", Index: 0, Model: a100}
	ctr := func(id, name string) *ledger.Container {
		return &ledger.Container{Node: "gpu1", ID: strings.Repeat(id, 32), Name: name, User: name}
	}
	train, notebook := ctr("1a", "train"), ctr("2b", "notebook")
	usage := []ledger.UsageTotal{
		{Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: train.ID, GPU: g, Container: train,
			Sums: ledger.Sums{AllocatedSeconds: 3600, HeldSeconds: 7200, PresentSeconds: 7200, UsedSeconds: 6480}},
		{Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: notebook.ID, GPU: g, Container: notebook,
			Sums: ledger.Sums{AllocatedSeconds: 3600, HeldSeconds: 7200, PresentSeconds: 7200, UsedSeconds: 360}},
	}
	gpus := []ledger.GPUTotal{{GPU: g, GPUSums: ledger.GPUSums{Seconds: 7200, AllocatedSeconds: 7200, UsedSeconds: 6840}}}
	for _, by := range []string{ByContainer, ByGPU} {
		r, err := Build(usage, gpus, Options{By: by, From: from, To: to, Cost: prices()})
		if err != nil {
			t.Fatal(err)
		}
		eff := map[string]float64{}
		for _, row := range r.Rows {
			eff[row.Key] = row.Efficiency
			if row.Efficiency < 0 || row.Efficiency > 1 {
				t.Errorf("by %s: row %s: efficiency %v, want within 0..1", by, row.Key, row.Efficiency)
			}
		}
		want := map[string]float64{"train": 0.9, "notebook": 0.05}
		if by == ByGPU {
			want = map[string]float64{"gpu1/0 " + a100: 6840.0 / 14400}
		}
		if diff := cmp.Diff(eff, want, approx); diff != "" {
			t.Errorf("by %s: efficiency (-got +want):\n%s", by, diff)
		}
		if tot := r.Totals; tot.GPUHoursHeld == nil || *tot.GPUHoursHeld != 4 || !approxEqual(tot.Efficiency, 6840.0/14400) || tot.GPUHoursAllocated != 2 {
			t.Errorf("by %s: totals held %v, allocated %v, efficiency %v; want 4, 2 and %v", by, tot.GPUHoursHeld, tot.GPUHoursAllocated, tot.Efficiency, 6840.0/14400)
		}
		if len(r.Notes) != 0 {
			t.Errorf("by %s: notes %q, want none", by, r.Notes)
		}
	}
}

// TestHeldUnknown: usage from a ledger written before held GPU-hours.
// alice's train has none at all; her notebook has 1 held hour from the
// rows written since, which used 0.25 GPU-hours (0.5 of its 0.75 used
// hours are in rows without held time); bob's job is all known.
func TestHeldUnknown(t *testing.T) {
	g0 := ledger.GPU{Node: "gpu1", UUID: "GPU-00000000-aaaa", Index: 0, Model: a100}
	g1 := ledger.GPU{Node: "gpu1", UUID: "GPU-11111111-bbbb", Index: 1, Model: a100}
	ctr := func(id, name, user string) *ledger.Container {
		return &ledger.Container{Node: "gpu1", ID: strings.Repeat(id, 32), Name: name, User: user}
	}
	train, notebook, job := ctr("1a", "train", "alice"), ctr("2b", "notebook", "alice"), ctr("3c", "job", "bob")
	usage := []ledger.UsageTotal{
		{Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: train.ID, GPU: g0, Container: train,
			Sums:   ledger.Sums{AllocatedSeconds: 7200, PresentSeconds: 7200, UsedSeconds: 3600},
			Unheld: ledger.Unheld{Rows: 2, All: true, UsedSeconds: 3600}},
		{Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: notebook.ID, GPU: g1, Container: notebook,
			Sums:   ledger.Sums{AllocatedSeconds: 3600, HeldSeconds: 3600, PresentSeconds: 3600, UsedSeconds: 2700},
			Unheld: ledger.Unheld{Rows: 1, UsedSeconds: 1800}},
		{Node: "gpu1", OwnerKind: ledger.KindContainer, OwnerID: job.ID, GPU: g1, Container: job,
			Sums: ledger.Sums{AllocatedSeconds: 3600, HeldSeconds: 3600, PresentSeconds: 3600, UsedSeconds: 1800}},
	}
	gpus := []ledger.GPUTotal{
		{GPU: g0, GPUSums: ledger.GPUSums{Seconds: 7200, AllocatedSeconds: 7200, UsedSeconds: 3600}},
		{GPU: g1, GPUSums: ledger.GPUSums{Seconds: 7200, AllocatedSeconds: 7200, UsedSeconds: 4500}},
	}
	build := func(by string) *Report {
		t.Helper()
		r, err := Build(usage, gpus, Options{By: by, From: from, To: to, Cost: prices()})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	type figures struct {
		Held       *float64
		Efficiency float64
	}
	got := func(r *Report) map[string]figures {
		m := map[string]figures{"(total)": {r.Totals.GPUHoursHeld, r.Totals.Efficiency}}
		for _, row := range r.Rows {
			m[row.Key] = figures{row.GPUHoursHeld, row.Efficiency}
		}
		return m
	}
	// Efficiency over the usage that has held time: notebook 0.25 / 1,
	// job 0.5 / 1, alice's 0.25 / 1, all (0.25 + 0.5) / 2.
	for _, tc := range []struct {
		by   string
		want map[string]figures
	}{
		{ByContainer, map[string]figures{"train": {nil, 0}, "notebook": {hours(1), 0.25}, "job": {hours(1), 0.5}, "(total)": {hours(2), 0.375}}},
		{ByUser, map[string]figures{"alice": {hours(1), 0.25}, "bob": {hours(1), 0.5}, "(total)": {hours(2), 0.375}}},
	} {
		r := build(tc.by)
		if diff := cmp.Diff(got(r), tc.want, approx); diff != "" {
			t.Errorf("by %s: held and efficiency (-got +want):\n%s", tc.by, diff)
		}
		if diff := cmp.Diff(r.Notes, []string{NoteHeldUnknown}); diff != "" {
			t.Errorf("by %s: notes (-got +want):\n%s", tc.by, diff)
		}
	}

	r := build(ByContainer)
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rows  []map[string]any `json:"rows"`
		Notes []string         `json:"notes"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, row := range doc.Rows {
		held, ok := row["gpu_hours_held"]
		if !ok {
			t.Errorf("JSON row %v has no gpu_hours_held", row["key"])
		}
		if (held == nil) != (row["key"] == "train") {
			t.Errorf("JSON row %v: gpu_hours_held %v, want null for train only", row["key"], held)
		}
	}
	if len(doc.Notes) != 1 {
		t.Errorf("JSON notes %q, want the held note", doc.Notes)
	}

	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	if !strings.Contains(table, "\nnote: "+NoteHeldUnknown+"\n") {
		t.Errorf("table has no note under it:\n%s", table)
	}
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[0] == "train" && (f[2] != "-" || f[5] != "-") {
			t.Errorf("table row of train: HELD %s, EFF %s; want - and -:\n%s", f[2], f[5], table)
		}
	}

	b.Reset()
	if err := r.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := slices.Index(recs[0], "gpu_hours_held")
	for _, rec := range recs[1:] {
		if rec[0] != "row" {
			continue
		}
		if want := map[string]string{"train": "", "notebook": "1", "job": "1"}[rec[1]]; rec[col] != want {
			t.Errorf("CSV row %s: gpu_hours_held %q, want %q", rec[1], rec[col], want)
		}
	}

	b.Reset()
	if err := r.WriteFOCUS(&b); err != nil {
		t.Fatal(err)
	}
	if recs, err = csv.NewReader(&b).ReadAll(); err != nil {
		t.Fatal(err)
	}
	col = slices.Index(recs[0], "x_gpu_hours_held")
	svc, name := slices.Index(recs[0], "ServiceName"), slices.Index(recs[0], "ResourceName")
	for _, rec := range recs[1:] {
		if rec[svc] != "GPU" {
			continue
		}
		if want := map[string]string{"train": "", "notebook": "1", "job": "1"}[rec[name]]; rec[col] != want {
			t.Errorf("FOCUS GPU line of %s: x_gpu_hours_held %q, want %q", rec[name], rec[col], want)
		}
	}
}
