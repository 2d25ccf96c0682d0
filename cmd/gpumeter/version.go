package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Stamped at link time, as the Dockerfile does:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD) -X main.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
//
// A build without them takes the commit and its time from the module's
// VCS stamp (go build in a git checkout without -buildvcs=false).
var (
	version   = "dev"
	commit    = ""
	buildDate = ""
)

// buildInfo is what the binary knows of how it was built.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// Date is the build date, else the commit's date; "" when neither
	// is known.
	Date      string `json:"build_date"`
	Modified  bool   `json:"modified"` // built from a checkout with changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	// Cgo says whether cgo was on: NVML is reached through it, so a
	// binary without it reads no GPU.
	Cgo bool `json:"cgo"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: buildDate,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Commit == "" {
				b.Commit = s.Value
			}
		case "vcs.time":
			if b.Date == "" {
				b.Date = s.Value
			}
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "CGO_ENABLED":
			b.Cgo = s.Value == "1"
		}
	}
	return b
}

// versionString is the version with the commit's first 12 characters, as
// gpumeter_build_info and the API's node header carry it.
func versionString() string {
	b := readBuildInfo()
	v := b.Version
	if len(b.Commit) >= 12 {
		v += "+" + b.Commit[:12]
	}
	return v
}

// writeVersion writes b as `gpumeter version` and `gpumeter --version`
// print it.
func writeVersion(w io.Writer, b buildInfo) error {
	unknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	c := unknown(b.Commit)
	if b.Modified {
		c += " (with uncommitted changes)"
	}
	nvml := "no: built with CGO_ENABLED=0, so it reads no GPU (only --demo and --sim)"
	if b.Cgo {
		nvml = "yes: NVML is loaded from libnvidia-ml.so.1 when serve starts"
	}
	_, err := fmt.Fprintf(w, "gpumeter %s\n  commit:     %s\n  built:      %s\n  go:         %s %s\n  cgo, NVML:  %s\n",
		b.Version, c, unknown(b.Date), b.GoVersion, b.Platform, nvml)
	return err
}

func newVersion() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date, Go version and whether NVML is in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := readBuildInfo()
			switch format {
			case "text":
				return writeVersion(cmd.OutOrStdout(), b)
			case "json":
				return writeJSONOut(cmd.OutOrStdout(), b)
			}
			return fmt.Errorf("--format: %q is not text or json", format)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	completeValues(cmd, "format", "text", "json")
	return cmd
}
