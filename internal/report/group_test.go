package report

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func TestContainerKeys(t *testing.T) {
	u := func(node, id, name string) ledger.UsageTotal {
		return ledger.UsageTotal{Node: node, OwnerKind: ledger.KindContainer, OwnerID: id,
			Container: &ledger.Container{Node: node, ID: id, Name: name},
			Sums:      ledger.Sums{AllocatedSeconds: 3600}}
	}
	id := func(c string) string { return strings.Repeat(c, 64) }
	usage := []ledger.UsageTotal{
		u("n1", id("a"), "job"), u("n1", id("b"), "job"), // same name
		u("n1", id("c"), "sim"), u("n2", id("c"), "sim"), // same name and ID on two nodes
		u("n1", id("d"), "solo"), u("n1", id("e"), ""), // a unique name, no name
		{Node: "n1", OwnerKind: ledger.KindContainer, OwnerID: id("f")}, // not in the ledger
	}
	usage[0].GPU = ledger.GPU{UUID: "GPU-0", Index: 0}
	usage = append(usage, usage[0]) // job a on a second GPU: one container, one key
	usage[len(usage)-1].GPU = ledger.GPU{UUID: "GPU-1", Index: 1}
	r, err := Build(usage, nil, Options{By: ByContainer})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, row := range r.Rows {
		got = append(got, row.Key)
		if row.Containers != 1 {
			t.Errorf("row %q counts %d containers, want 1", row.Key, row.Containers)
		}
	}
	want := []string{"eeeeeeeeeeee", "ffffffffffff", "job (aaaaaaaaaaaa)", "job (bbbbbbbbbbbb)",
		"n1/sim (cccccccccccc)", "n2/sim (cccccccccccc)", "solo"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("keys (-got +want):\n%s", diff)
	}
}

func TestGPUKeys(t *testing.T) {
	usage := []ledger.UsageTotal{
		{Node: "n1", OwnerKind: ledger.KindContainer, OwnerID: "c1", GPU: ledger.GPU{UUID: "GPU-x", Index: -1}},
		{Node: "n1", OwnerKind: ledger.KindContainer, OwnerID: "c2", CPUSeconds: 3600}, // CPU only
		{Node: "n1", OwnerKind: ledger.KindContainer, OwnerID: "c3", GPU: ledger.GPU{UUID: "GPU-y", Index: 3, Model: "Tesla T4"}},
	}
	r, err := Build(usage, nil, Options{By: ByGPU})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, row := range r.Rows {
		got = append(got, row.Key)
	}
	if diff := cmp.Diff(got, []string{KeyNoGPU, "GPU-x", "n1/3 Tesla T4"}); diff != "" {
		t.Errorf("keys (-got +want):\n%s", diff)
	}
}
