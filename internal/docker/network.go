package docker

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// NetworkLabel marks a network the agent made for its jobs; its value is
// the kind, NetworkIsolated.
const NetworkLabel = "gpumeter.network"

// NetworkIsolated is NetworkLabel's value on a node's isolated jobs
// network.
const NetworkIsolated = "isolated"

// iccOption turns inter-container traffic off on a bridge network: the
// engine drops packets between two containers of the network (iptables
// rules on the bridge), while each still reaches the host, the world and
// what it publishes.
const iccOption = "com.docker.network.bridge.enable_icc"

// Network is a Docker network as the queue uses it.
type Network struct {
	ID   string
	Name string
	// Gateway is the host's address on the network, where a job reaches
	// services on the host; invalid when the engine gave none.
	Gateway netip.Addr
	// Created says EnsureIsolatedNetwork made the network; false, it
	// found one it had made before.
	Created bool
}

// EnsureIsolatedNetwork finds or creates the bridge network of this
// node's jobs, spec.NetworkName(node), with inter-container traffic off:
// on it a job reaches the host and the world but no other job. A network
// of that name is reused only when the agent made it (its labels name it
// isolated and this node, and traffic between its containers is still
// off); any other is refused, since jobs would join a network someone
// else controls.
func (j *Jobs) EnsureIsolatedNetwork(ctx context.Context) (Network, error) {
	name := spec.NetworkName(j.node)
	if n, err := j.ownNetwork(ctx, name); err == nil || !cerrdefs.IsNotFound(err) {
		return n, err
	}
	res, err := j.cli.api.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver:  "bridge",
		Options: map[string]string{iccOption: "false"},
		Labels:  map[string]string{NetworkLabel: NetworkIsolated, spec.NodeLabel: j.node},
	})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			// Made meanwhile, by another start of this agent.
			return j.ownNetwork(ctx, name)
		}
		return Network{}, fmt.Errorf("create network %s: %w", name, err)
	}
	for _, w := range res.Warning {
		j.log.Warn("docker warns of the jobs network", "network", name, "warning", w)
	}
	// Engines before API 1.44 create a second network of a name in use
	// unless asked not to, which this client does not: keep the oldest
	// of the name, so that two starts racing end on one network.
	if err := j.dropDuplicate(ctx, name, res.ID); err != nil {
		return Network{}, err
	}
	n, err := j.ownNetwork(ctx, name)
	if err == nil {
		n.Created = n.ID == res.ID
		j.log.Info("created the jobs network", "network", name, "id", n.ID, "gateway", n.Gateway)
	}
	return n, err
}

// ownNetwork inspects network name and checks that it is this node's
// isolated network; a network that is not there is an error the engine's
// not-found.
func (j *Jobs) ownNetwork(ctx context.Context, name string) (Network, error) {
	res, err := j.cli.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return Network{}, err
		}
		return Network{}, fmt.Errorf("inspect network %s: %w", name, err)
	}
	nw := res.Network
	if nw.Name != name {
		// The engine matched an id prefix, not the name.
		return Network{}, fmt.Errorf("inspect network %s: %w", name, cerrdefs.ErrNotFound)
	}
	if nw.Labels[NetworkLabel] != NetworkIsolated || nw.Labels[spec.NodeLabel] != j.node {
		return Network{}, fmt.Errorf("network %s exists but gpumeter did not create it for node %q (labels %s=%q, %s=%q): "+
			"remove it (docker network rm %s) or rename the node, or set queue.network to that network to use it as it is",
			name, j.node, NetworkLabel, nw.Labels[NetworkLabel], spec.NodeLabel, nw.Labels[spec.NodeLabel], name)
	}
	if nw.Driver != "bridge" || nw.Options[iccOption] != "false" || nw.Internal {
		return Network{}, fmt.Errorf("network %s is labelled as this node's isolated jobs network but is not a bridge with %s=false "+
			"(driver %q, options %v): remove it (docker network rm %s) once no job uses it, and the agent makes it again",
			name, iccOption, nw.Driver, nw.Options, name)
	}
	n := Network{ID: nw.ID, Name: nw.Name}
	for _, c := range nw.IPAM.Config {
		if c.Gateway.Is4() {
			n.Gateway = c.Gateway
			break
		}
	}
	return n, nil
}

// dropDuplicate removes the network id when another network of the same
// name was made before it.
func (j *Jobs) dropDuplicate(ctx context.Context, name, id string) error {
	res, err := j.cli.api.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("name", name)})
	if err != nil {
		return fmt.Errorf("list networks named %s: %w", name, err)
	}
	same := slices.DeleteFunc(res.Items, func(n network.Summary) bool { return n.Name != name })
	if len(same) < 2 {
		return nil
	}
	slices.SortFunc(same, func(a, b network.Summary) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if same[0].ID == id {
		return fmt.Errorf("network %s: %d networks of the name exist; remove all but one (docker network ls --filter name=%s)", name, len(same), name)
	}
	if _, err := j.cli.api.NetworkRemove(ctx, id, client.NetworkRemoveOptions{}); err != nil {
		return fmt.Errorf("remove the second network %s (%.12s): %w", name, id, err)
	}
	return nil
}

// IsolatedJobs is Jobs whose every Create first finds or makes the
// node's isolated network (EnsureIsolatedNetwork, one inspect when it is
// there): an agent that started while the engine was away, or whose
// network someone removed, still never creates a job on a network that
// is not there, or is not its own. An engine that cannot be reached fails
// the create as any other call would.
type IsolatedJobs struct{ *Jobs }

// Create ensures the isolated network, then creates s's container as
// Jobs.Create does.
func (j IsolatedJobs) Create(ctx context.Context, s *spec.Spec) (string, error) {
	if _, err := j.EnsureIsolatedNetwork(ctx); err != nil {
		return "", fmt.Errorf("create %s: %w", s.Name, err)
	}
	return j.Jobs.Create(ctx, s)
}

// RemoveIsolatedNetwork removes this node's isolated network if no
// container is attached to it; one in use, or one gone already, is left
// as it is and is no error. The agent calls it when it stops, so that a
// node that runs no job keeps no network (each takes a subnet from the
// engine's pools).
func (j *Jobs) RemoveIsolatedNetwork(ctx context.Context) error {
	name := spec.NetworkName(j.node)
	n, err := j.ownNetwork(ctx, name)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
	res, err := j.cli.api.NetworkInspect(ctx, n.ID, client.NetworkInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("inspect network %s: %w", name, err)
	}
	if len(res.Network.Containers) > 0 {
		return nil
	}
	if _, err := j.cli.api.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		// A job attached since the inspect keeps it: that is what the
		// engine's refusal (active endpoints) says.
		if cerrdefs.IsConflict(err) || cerrdefs.IsPermissionDenied(err) || strings.Contains(err.Error(), "active endpoints") {
			return nil
		}
		return fmt.Errorf("remove network %s: %w", name, err)
	}
	return nil
}
