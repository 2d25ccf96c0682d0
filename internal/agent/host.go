package agent

import (
	"github.com/gpumeter/gpumeter/internal/cgroup"
	"github.com/gpumeter/gpumeter/internal/container"
)

// hostProcs adapts the host's /proc and cgroups to what the sampler and
// the Docker inventory need.
type hostProcs struct {
	resolver   *cgroup.Resolver
	users      *cgroup.Users
	procRoot   string
	cgroupRoot string
}

// Resolve attributes a real host process to its container or Unix user.
func (h *hostProcs) Resolve(pid uint32) (container.Owner, bool, error) {
	p, err := h.resolver.Resolve(pid)
	if err != nil {
		return container.Owner{}, false, err
	}
	if p.Ref.ContainerID != "" {
		return container.Owner{Kind: container.OwnerContainer, ID: p.Ref.ContainerID}, true, nil
	}
	return container.Owner{Kind: container.OwnerHost, ID: p.User}, true, nil
}

func (h *hostProcs) Prune(keep func(uint32) bool) { h.resolver.Prune(keep) }

func (h *hostProcs) ProcessUser(pid int) (string, error) {
	p, err := h.resolver.Resolve(uint32(pid))
	if err != nil {
		return "", err
	}
	return p.User, nil
}

func (h *hostProcs) UserName(uid int) string { return h.users.Name(uid) }

func (h *hostProcs) Stats(pid int) (float64, uint64, error) {
	st, err := cgroup.ReadStats(h.procRoot, h.cgroupRoot, pid)
	return st.CPUSeconds, st.MemoryBytes, err
}
