// Package docker is gpumeter's side of a Docker host, over one Client:
// the container inventory (it lists and inspects containers over the
// Docker Engine API, keeps the result cached and fresh from the events
// stream, reconnects when the daemon goes away, and works out each
// container's owner and GPU request), the queue's job containers (Jobs)
// and the one path that stops a container (Stopper).
package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
)

// Default label keys and retention.
const (
	DefaultUserLabel    = "gpumeter.user"
	DefaultTeamLabel    = "gpumeter.team"
	DefaultProjectLabel = "gpumeter.project"
	DefaultKeep         = 5 * time.Minute
)

// ErrUnreachable is wrapped by the error Containers returns while the
// daemon cannot be reached.
var ErrUnreachable = errors.New("docker daemon unreachable")

// Config configures an Inventory.
type Config struct {
	// UserLabel, TeamLabel and ProjectLabel are the label keys that name a
	// container's owner; empty means gpumeter.user, gpumeter.team and
	// gpumeter.project.
	UserLabel, TeamLabel, ProjectLabel string
	// Procs reads the host's processes. When nil, containers carry no CPU
	// and memory counters and the owner never comes from the main process.
	Procs ProcReader
	// Logger receives API errors (connection changes go to the
	// client's); nil discards.
	Logger *slog.Logger
	// Keep is how long a stopped container stays listed; zero means 5m.
	Keep time.Duration
}

// ProcReader is what the inventory needs from the host's /proc and cgroups.
type ProcReader interface {
	// ProcessUser returns the name of the Unix user that owns the process.
	ProcessUser(pid int) (string, error)
	// UserName maps a uid to a name through the password database; it
	// returns "" when the uid has no entry.
	UserName(uid int) string
	// Stats returns the CPU time (user+system) and resident memory of the
	// container whose main process is pid.
	Stats(pid int) (cpuSeconds float64, memoryBytes uint64, err error)
}

// Inventory is the cached container list of one Docker daemon. Run keeps it
// fresh; the other methods read the cache and never wait on the daemon.
type Inventory struct {
	cfg Config
	log *slog.Logger
	cli *Client

	mu   sync.RWMutex
	byID map[string]*container.Container
	// list holds the cached containers sorted by ID; it is rebuilt on every
	// change and never modified in place, so readers may hold on to it.
	list      []container.Container
	connected bool
	downSince time.Time
	downErr   error

	lists atomic.Int64 // completed full list+inspect passes, for tests
}

// New returns the inventory of cli's daemon for cfg. It does not contact
// the daemon; Run does.
func New(cli *Client, cfg Config) *Inventory {
	if cfg.UserLabel == "" {
		cfg.UserLabel = DefaultUserLabel
	}
	if cfg.TeamLabel == "" {
		cfg.TeamLabel = DefaultTeamLabel
	}
	if cfg.ProjectLabel == "" {
		cfg.ProjectLabel = DefaultProjectLabel
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Inventory{
		cfg:       cfg,
		log:       log.With("component", "docker"),
		cli:       cli,
		byID:      make(map[string]*container.Container),
		downSince: time.Now(),
		downErr:   container.ErrNotConnected,
	}
}

// Containers returns the cached containers sorted by ID, with the CPU and
// memory counters of running ones read fresh from Procs. Containers that
// stopped more than Keep before now are left out. While the daemon is
// unreachable it returns the cached list together with an error wrapping
// ErrUnreachable.
//
// The returned Labels maps and GPU ID slices are shared with the cache and
// must not be modified.
func (i *Inventory) Containers(ctx context.Context, now time.Time) ([]container.Container, error) {
	i.mu.RLock()
	list := i.list
	var err error
	if !i.connected {
		err = fmt.Errorf("%w since %s: %w", ErrUnreachable, i.downSince.Format(time.RFC3339), i.downErr)
	}
	i.mu.RUnlock()

	out := make([]container.Container, 0, len(list))
	for _, c := range list {
		if i.expired(&c, now) {
			continue
		}
		if c.Running && c.PID > 0 && i.cfg.Procs != nil {
			cpu, mem, serr := i.cfg.Procs.Stats(c.PID)
			if serr != nil {
				c.StatsErr = serr.Error()
			} else {
				c.CPUSeconds, c.MemoryBytes = cpu, mem
			}
		}
		out = append(out, c)
	}
	return out, err
}

// Lookup returns the cached container with this full ID. Its CPU and
// memory counters are not filled.
func (i *Inventory) Lookup(id string) (container.Container, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	c, ok := i.byID[id]
	if !ok {
		return container.Container{}, false
	}
	return *c, true
}

// Connected reports whether the inventory is following the daemon's events,
// that is, whether the cache is current.
func (i *Inventory) Connected() bool {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.connected
}

// expired reports whether c stopped more than Keep before now.
func (i *Inventory) expired(c *container.Container, now time.Time) bool {
	return !c.Running && !c.FinishedAt.IsZero() && now.Sub(c.FinishedAt) > i.cfg.Keep
}

// put stores c in the cache, replacing any entry with its ID.
func (i *Inventory) put(c container.Container) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.byID[c.ID] = &c
	i.rebuildLocked()
}

// remove drops ids from the cache.
func (i *Inventory) remove(ids ...string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := len(i.byID)
	for _, id := range ids {
		delete(i.byID, id)
	}
	if len(i.byID) != n {
		i.rebuildLocked()
	}
}

// cachedIDs returns the IDs in the cache.
func (i *Inventory) cachedIDs() []string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	ids := make([]string, 0, len(i.byID))
	for id := range i.byID {
		ids = append(ids, id)
	}
	return ids
}

// sweep drops containers that stopped more than Keep before now.
func (i *Inventory) sweep(now time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := len(i.byID)
	for id, c := range i.byID {
		if i.expired(c, now) {
			delete(i.byID, id)
		}
	}
	if len(i.byID) != n {
		i.rebuildLocked()
	}
}

func (i *Inventory) rebuildLocked() {
	list := make([]container.Container, 0, len(i.byID))
	for _, c := range i.byID {
		list = append(list, *c)
	}
	slices.SortFunc(list, func(a, b container.Container) int { return cmp.Compare(a.ID, b.ID) })
	i.list = list
}

func (i *Inventory) setConnected() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.connected = true
	i.downErr = nil
}

// setDisconnected records err as the reason the daemon is unreachable. The
// time of the first failure stands until the next good connection.
func (i *Inventory) setDisconnected(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.connected {
		i.connected = false
		i.downSince = time.Now()
	}
	i.downErr = err
}
