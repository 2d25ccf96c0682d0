package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// TestDoctorHere runs doctor on this host, whose engine has only runc and
// no GPU: it fails, exits 1, and its JSON says why.
func TestDoctorHere(t *testing.T) {
	dockertest.Client(t)
	t.Setenv("GPUMETER_DATA_DIR", t.TempDir())
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs([]string{"doctor", "--format", "json", "--listen", "127.0.0.1:0"})
	err := root.Execute()
	var ee exitError
	if !errors.As(err, &ee) || ee != 1 {
		t.Fatalf("doctor: %v, want exit status 1", err)
	}
	var got struct {
		Checks []struct {
			ID, Status string
		} `json:"checks"`
		Summary struct{ Fail int } `json:"summary"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	status := map[string]string{}
	for _, c := range got.Checks {
		status[c.ID] = c.Status
	}
	for id, want := range map[string]string{"driver.kernel": "FAIL", "docker.nvidia_runtime": "FAIL", "docker.engine": "PASS", "gpumeter.data_dir": "PASS"} {
		if status[id] != want {
			t.Errorf("%s = %q, want %s", id, status[id], want)
		}
	}
}

func TestDoctorBadFormat(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"doctor", "--format", "yaml"})
	if err := root.Execute(); err == nil {
		t.Fatal("doctor --format yaml: no error")
	}
}
