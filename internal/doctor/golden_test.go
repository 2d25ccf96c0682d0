package doctor

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGolden compares the whole table and JSON of two fixture hosts with
// their golden files: the healthy one, and nouveau holding the GPUs on a
// host whose engine has only runc.
func TestGolden(t *testing.T) {
	runcOnly := DockerInfo{APIVersion: "1.41", ServerVersion: "20.10.24", CgroupDriver: "cgroupfs", Runtimes: []string{"runc"}, DefaultRuntime: "runc"}
	tests := []struct {
		name string
		env  Env
	}{
		{"healthy", fixtureEnv("healthy", h100s(), fakeDocker{info: nvidiaEngine})},
		{"nouveau", fixtureEnv("nouveau", nil, fakeDocker{info: runcOnly})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := Run(context.Background(), tt.env)
			var table, js bytes.Buffer
			if err := WriteTable(&table, rs); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, rs); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", "golden", tt.name+".txt"), table.Bytes())
			compareGolden(t, filepath.Join("testdata", "golden", tt.name+".json"), js.Bytes())
		})
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}
