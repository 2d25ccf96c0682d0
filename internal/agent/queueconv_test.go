package agent

import (
	"reflect"
	"testing"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

func TestQueueRules(t *testing.T) {
	q := config.Default().Queue
	q.Images = []string{"ghcr.io/lab/*"}
	q.MountRoots = []string{"/data"}
	q.PublishPorts = []string{"8000-8099", "8888"}
	q.MaxGPUsPerUser = map[string]int{"default": 2, "alice": 8}
	q.Placement = "spread"
	q.Labels = []string{"gpumeter.project", "gpumeter.sim.*"}
	rules, sched, err := queueRules(q, "lab-1", "gpumeter.user", "gpumeter.team")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rules.Labels, q.Labels) {
		t.Errorf("label patterns %v, want %v", rules.Labels, q.Labels)
	}
	if want := []spec.PortRange{{First: 8000, Last: 8099}, {First: 8888, Last: 8888}}; !reflect.DeepEqual(rules.PublishPorts, want) {
		t.Errorf("ports %v, want %v", rules.PublishPorts, want)
	}
	if rules.Network != "gpumeter-jobs-lab-1" || rules.MaxPids != 4096 || rules.MaxOpenFiles != spec.OpenFilesFor(65536) {
		t.Errorf("network %q, pids %d, open files %d; want the node's isolated network and the default limits", rules.Network, rules.MaxPids, rules.MaxOpenFiles)
	}
	for _, n := range []string{"none", "bridge", "lab-jobs"} {
		q := q
		q.Network = n
		if r, _, err := queueRules(q, "lab-1", "", ""); err != nil || r.Network != n {
			t.Errorf("queue.network %s: rules' network %q, %v; want it as it is", n, r.Network, err)
		}
	}
	if sched.Placement != queue.Spread || sched.MaxGPUsPerUser != 2 || sched.UserMaxGPUs["alice"] != 8 {
		t.Errorf("sched = %+v", sched)
	}
	for _, bad := range []string{"0", "9000-8000", "x", "70000"} {
		q.PublishPorts = []string{bad}
		if _, _, err := queueRules(q, "lab-1", "", ""); err == nil {
			t.Errorf("port range %q accepted", bad)
		}
	}
	q.PublishPorts = nil
	q.Placement = "random"
	if _, _, err := queueRules(q, "lab-1", "", ""); err == nil {
		t.Error("placement random accepted")
	}
}

func TestExemptKeys(t *testing.T) {
	got := exemptKeys([]string{"lab.keep=yes", "lab.notebook", "a=b=c"})
	if want := []string{"lab.keep", "lab.notebook", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("exemptKeys = %v, want %v", got, want)
	}
}
