package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/config"
)

// A scenario that plays real containers' labels cannot be served with
// Docker turned off: the agent says so instead of showing no use.
func TestNewFromLabelsNeedsDocker(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.yaml")
	err := os.WriteFile(file, []byte("version: 1\nduration: 1h\ndocker:\n  containers: from_labels\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Source, cfg.SimFile, cfg.DataDir = "sim", file, dir
	cfg.DockerEnabled = false
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err == nil {
		a.Close()
		t.Fatal("New = nil error, want one saying docker.enabled is false")
	}
	want := file + ": docker.containers: from_labels plays real Docker containers, but docker.enabled is false"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("New error = %q, want it to contain %q", err, want)
	}
}
