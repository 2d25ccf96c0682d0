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

// TestDoctorRootNotADirectory: a host.root that is a file is a FAIL that
// names it, not a crash or a refusal to run.
func TestDoctorRootNotADirectory(t *testing.T) {
	t.Setenv("GPUMETER_DATA_DIR", t.TempDir())
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs([]string{"doctor", "--format", "json", "--host-root", "/etc/passwd", "--docker-enabled=false", "--listen", "127.0.0.1:0"})
	var ee exitError
	if err := root.Execute(); !errors.As(err, &ee) || ee != 1 {
		t.Fatalf("doctor: %v, want exit status 1", err)
	}
	var got struct {
		Checks []struct{ ID, Status, Detail string } `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(got.Checks) == 0 || got.Checks[0].ID != "host.root" || got.Checks[0].Status != "FAIL" || got.Checks[0].Detail != "host.root /etc/passwd is not a directory" {
		t.Errorf("first check = %+v, want host.root FAIL naming /etc/passwd", got.Checks)
	}
}

func TestDoctorCommandWithoutImage(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"doctor", "--", "nvidia-smi"})
	if err := root.Execute(); err == nil || err.Error() != "a command (nvidia-smi) is for --run-test IMAGE" {
		t.Fatalf("doctor -- nvidia-smi: %v, want the command refused without --run-test", err)
	}
}
