package doctor

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

var cdiDirs = []string{"etc/cdi", "var/run/cdi"}

func checkCDIEnabled(ctx context.Context, s *state) Result {
	in, err := s.dockerInfo(ctx)
	if err != nil {
		return skip("Docker not reachable")
	}
	if !apiAtLeast(in.APIVersion, 1, 44) {
		return skip("Docker API %s is older than 1.44: this engine (%s) has no CDI support; `--gpus` goes through the nvidia hook", in.APIVersion, in.ServerVersion)
	}
	if len(in.CDISpecDirs) == 0 {
		return warn("set \"features\": {\"cdi\": true} in /"+daemonJSON+" and restart Docker (on by default from Docker 28)", "Docker's CDI spec directories are empty: CDI is off")
	}
	return pass("CDI spec directories %s", strings.Join(in.CDISpecDirs, ", "))
}

// cdiSpec is the part of a CDI spec the checks read.
type cdiSpec struct {
	Kind    string `yaml:"kind"`
	Devices []struct {
		Name  string   `yaml:"name"`
		Edits cdiEdits `yaml:"containerEdits"`
	} `yaml:"devices"`
	Edits cdiEdits `yaml:"containerEdits"`
}

type cdiEdits struct {
	DeviceNodes []struct {
		Path     string `yaml:"path"`
		HostPath string `yaml:"hostPath"`
	} `yaml:"deviceNodes"`
	Mounts []struct {
		HostPath string `yaml:"hostPath"`
	} `yaml:"mounts"`
}

var soVersion = regexp.MustCompile(`lib(?:cuda|nvidia-ml)\.so\.(\d+\.\d+(?:\.\d+)?)$`)

func checkCDISpecs(_ context.Context, s *state) Result {
	var files []string
	for _, d := range cdiDirs {
		entries, _ := fs.ReadDir(s.Root, d)
		for _, e := range entries {
			if ext := path.Ext(e.Name()); ext == ".yaml" || ext == ".json" {
				files = append(files, path.Join(d, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return skip("no CDI specs in /etc/cdi or /var/run/cdi")
	}
	regen := "regenerate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (or enable nvidia-cdi-refresh, toolkit 1.18+, so upgrades regenerate it)"
	var problems []string
	bad := false
	for _, f := range files {
		data, err := fs.ReadFile(s.Root, f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", s.hostPath(f), unwrapPath(err)))
			continue
		}
		var spec cdiSpec
		if err := yaml.Unmarshal(data, &spec); err != nil {
			problems = append(problems, fmt.Sprintf("%s: does not parse: %v", s.hostPath(f), err))
			bad = true
			continue
		}
		if !strings.HasPrefix(spec.Kind, "nvidia.com/") {
			continue
		}
		edits := []cdiEdits{spec.Edits}
		var names []string
		for _, d := range spec.Devices {
			edits = append(edits, d.Edits)
			names = append(names, d.Name)
		}
		for _, e := range edits {
			for _, n := range e.DeviceNodes {
				p := n.HostPath
				if p == "" {
					p = n.Path
				}
				if !s.exists(strings.TrimPrefix(p, "/")) {
					problems = append(problems, fmt.Sprintf("%s: device node %s does not exist", s.hostPath(f), p))
					bad = true
				}
			}
			for _, m := range e.Mounts {
				if !s.exists(strings.TrimPrefix(m.HostPath, "/")) {
					problems = append(problems, fmt.Sprintf("%s: %s does not exist", s.hostPath(f), m.HostPath))
					bad = true
				}
				if v := soVersion.FindStringSubmatch(m.HostPath); v != nil && s.driverVersion != "" && v[1] != s.driverVersion {
					problems = append(problems, fmt.Sprintf("%s: libraries of driver %s, the driver is %s: stale since an upgrade", s.hostPath(f), v[1], s.driverVersion))
					bad = true
				}
			}
		}
		if s.nvmlOK {
			for _, n := range names {
				if strings.HasPrefix(n, "GPU-") && !slices.Contains(s.uuids, n) {
					problems = append(problems, fmt.Sprintf("%s: device %s is no GPU NVML sees", s.hostPath(f), n))
					bad = true
				}
			}
		}
	}
	problems = slices.Compact(problems)
	if bad {
		return fail(regen, "%s", strings.Join(problems, "\n"))
	}
	if len(problems) > 0 {
		return warn(regen, "%s", strings.Join(problems, "\n"))
	}
	return pass("%d CDI spec files parse and match the driver", len(files))
}
