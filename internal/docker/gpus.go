package docker

import (
	"slices"
	"strconv"
	"strings"

	mcontainer "github.com/moby/moby/api/types/container"

	"github.com/gpumeter/gpumeter/internal/container"
)

// visibleDevicesEnv is the variable the NVIDIA container runtime reads to
// pick the GPUs it exposes to a container.
const visibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// cdiAnnotationPrefix marks the annotation keys that carry CDI device names
// (the CDI spec's "cdi.k8s.io/<name>" convention).
const cdiAnnotationPrefix = "cdi.k8s.io/"

// GPURequestFrom works out which GPUs a container was given from its host
// config and its environment (Config.Env of an inspect, which includes the
// image's ENV).
//
// Explicit requests come from hc: device requests of the "nvidia" driver or
// with the "gpu" capability (what docker run --gpus sends: device IDs are
// kept as given, Count N means indexes 0..N-1 and Count -1 means all), and
// CDI device names of kind nvidia.com/gpu ("nvidia.com/gpu=0",
// "nvidia.com/gpu=GPU-<uuid>", "nvidia.com/gpu=all") in "cdi" device
// requests, in Devices and in cdi.k8s.io/ annotations. Explicit requests add
// up.
//
// NVIDIA_VISIBLE_DEVICES ("all", "none", "void", a comma list of indexes or
// UUIDs; the last one in env wins) counts only when there is no explicit
// request: the daemon appends its own NVIDIA_VISIBLE_DEVICES for a --gpus
// request, which overrides the "all" that CUDA base images put in their ENV,
// and CDI injects devices without looking at the variable.
//
// IDs are split on commas, trimmed, deduplicated and kept in the order they
// were first seen; a request for all GPUs has no IDs.
func GPURequestFrom(hc *mcontainer.HostConfig, env []string) container.GPURequest {
	var b requestBuilder
	if hc != nil {
		for _, dr := range hc.DeviceRequests {
			switch {
			case dr.Driver == "cdi":
				for _, id := range dr.DeviceIDs {
					for _, name := range splitList(id) {
						b.addCDI(name)
					}
				}
			case dr.Driver == "nvidia" || hasGPUCapability(dr.Capabilities):
				b.explicit = true
				switch {
				case len(dr.DeviceIDs) > 0:
					for _, id := range dr.DeviceIDs {
						for _, one := range splitList(id) {
							b.add(one)
						}
					}
				case dr.Count < 0:
					b.all = true
				case dr.Count > 0:
					for n := range dr.Count {
						b.add(strconv.Itoa(n))
					}
				}
			}
		}
		for _, d := range hc.Devices {
			b.addCDI(d.PathOnHost)
		}
		keys := make([]string, 0, len(hc.Annotations))
		for k := range hc.Annotations {
			if strings.HasPrefix(k, cdiAnnotationPrefix) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys) // map order is random; the ID order must not be
		for _, k := range keys {
			for _, name := range splitList(hc.Annotations[k]) {
				b.addCDI(name)
			}
		}
	}
	if !b.explicit {
		if v, ok := lastEnv(env, visibleDevicesEnv); ok {
			b.addVisibleDevices(v)
		}
	}
	return b.request()
}

// requestBuilder collects GPU IDs from several sources.
type requestBuilder struct {
	all      bool
	ids      []string
	explicit bool // a device request or CDI name was seen, even an empty one
}

func (b *requestBuilder) add(id string) {
	if id == "" || slices.Contains(b.ids, id) {
		return
	}
	b.ids = append(b.ids, id)
}

// addCDI takes a fully qualified CDI device name and keeps it when it names
// NVIDIA GPUs; anything else (a device path, another vendor) is ignored.
func (b *requestBuilder) addCDI(name string) {
	kind, dev, ok := strings.Cut(strings.TrimSpace(name), "=")
	if !ok || kind != "nvidia.com/gpu" || dev == "" {
		return
	}
	b.explicit = true
	if dev == "all" {
		b.all = true
		return
	}
	b.add(dev)
}

func (b *requestBuilder) addVisibleDevices(v string) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "all":
		b.all = true
		return
	case "", "none", "void":
		return
	}
	for _, id := range splitList(v) {
		// A path is the runtime's volume-mount mode: the devices are named by
		// mounts, not by the variable.
		if !strings.HasPrefix(id, "/") {
			b.add(id)
		}
	}
}

func (b *requestBuilder) request() container.GPURequest {
	if b.all {
		return container.GPURequest{All: true}
	}
	return container.GPURequest{IDs: b.ids}
}

func hasGPUCapability(caps [][]string) bool {
	for _, and := range caps {
		if slices.Contains(and, "gpu") {
			return true
		}
	}
	return false
}

// splitList splits a comma list, trimming blanks and dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// lastEnv returns the value of the last KEY=value entry for key, as the
// runtime would see it.
func lastEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		k, v, ok := strings.Cut(env[i], "=")
		if ok && k == key {
			return v, true
		}
	}
	return "", false
}
