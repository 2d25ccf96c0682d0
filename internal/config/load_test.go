package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadPrecedence: the file overrides the defaults, the environment
// the file and the flags the environment, key by key.
func TestLoadPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpumeter.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:9500\ninterval: 2s\nlog_level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := func(k Key) []string {
		if k.Name == "log_level" {
			return []string{"debug"}
		}
		return nil
	}
	for name, s := range map[string]Sources{
		"named file":         {File: path, Environ: []string{"GPUMETER_INTERVAL=3s"}, Flags: flags},
		"file from environ":  {Environ: []string{"GPUMETER_CONFIG=" + path, "GPUMETER_INTERVAL=3s"}, Flags: flags},
		"named file wins":    {File: path, Environ: []string{"GPUMETER_CONFIG=/nonexistent.yaml", "GPUMETER_INTERVAL=3s"}, Flags: flags},
		"first variable set": {Environ: []string{"GPUMETER_CONFIG=" + path, "GPUMETER_CONFIG=/nonexistent.yaml", "GPUMETER_INTERVAL=3s"}, Flags: flags},
	} {
		c, err := Load(s)
		if err != nil {
			t.Fatalf("%s: Load() = %v", name, err)
		}
		if c.Listen != "127.0.0.1:9500" || c.Interval != 3*time.Second || c.LogLevel != "debug" || c.HourRetention != Default().HourRetention {
			t.Errorf("%s: listen %q, interval %v, log level %q, hour retention %v; want the file's listen, the variable's interval, the flag's log level and the default retention",
				name, c.Listen, c.Interval, c.LogLevel, c.HourRetention)
		}
	}
}

// TestLoadErrors: each source's error names where the value came from.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	path, empty := filepath.Join(dir, "gpumeter.yaml"), filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(path, []byte("interval: soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An empty file, so that the default file is not read where it exists.
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		s    Sources
		want string
	}{
		{"file", Sources{File: path}, path + ":1: interval: "},
		{"missing file", Sources{File: path + ".missing"}, "read config: "},
		{"environment", Sources{File: empty, Environ: []string{"GPUMETER_INTERVAL=soon"}}, "environment GPUMETER_INTERVAL: interval: "},
		{"flag", Sources{File: empty, Flags: func(k Key) []string {
			if k.Name == "interval" {
				return []string{"soon"}
			}
			return nil
		}}, "--interval: interval: "},
	} {
		if _, err := Load(tt.s); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: Load() = %v, want an error starting %q", tt.name, err, tt.want)
		}
	}
}
