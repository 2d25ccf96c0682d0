package docker

import (
	"strconv"
	"strings"
	"time"

	mcontainer "github.com/moby/moby/api/types/container"

	"github.com/gpumeter/gpumeter/internal/container"
)

// composeProjectLabel is set by Docker Compose on every container of a
// project; it stands in for the project label when that is missing.
const composeProjectLabel = "com.docker.compose.project"

// fromInspect turns an inspect result into a Container. prev is the entry
// the cache held for the same ID, or nil: once a container has stopped its
// main process is gone, so an owner found through that process is carried
// over from prev.
func (i *Inventory) fromInspect(r *mcontainer.InspectResponse, prev *container.Container) container.Container {
	c := container.Container{
		ID:   r.ID,
		Name: strings.TrimPrefix(r.Name, "/"),
	}
	var env []string
	var user string
	if cfg := r.Config; cfg != nil {
		c.Image = cfg.Image
		c.Labels = cfg.Labels
		env = cfg.Env
		user = cfg.User
	}
	if st := r.State; st != nil {
		c.Running = st.Running
		if st.Running {
			c.PID = st.Pid
		}
		c.StartedAt = parseTime(st.StartedAt)
		if !st.Running {
			c.FinishedAt = parseTime(st.FinishedAt)
			c.ExitCode = st.ExitCode
		}
	}
	c.GPUs = GPURequestFrom(r.HostConfig, env)

	c.User = c.Labels[i.cfg.UserLabel]
	c.Team = c.Labels[i.cfg.TeamLabel]
	c.Project = c.Labels[i.cfg.ProjectLabel]
	if c.Project == "" {
		c.Project = c.Labels[composeProjectLabel]
	}
	if c.User == "" {
		c.User = i.configUser(user)
	}
	if c.User == "" && c.PID > 0 && i.cfg.Procs != nil {
		name, err := i.cfg.Procs.ProcessUser(c.PID)
		if err != nil {
			i.log.Debug("owner of main process", "container", c.ShortID(), "pid", c.PID, "err", err)
		}
		c.User = name
	}
	if c.User == "" && prev != nil {
		c.User = prev.User
	}
	return c
}

// configUser maps Config.User ("name", "name:group", "uid", "uid:gid") to a
// user name. A uid goes through the password database; when that does not
// know it, the number stands.
func (i *Inventory) configUser(s string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(s), ":")
	if name == "" {
		return ""
	}
	uid, err := strconv.Atoi(name)
	if err != nil || uid < 0 {
		return name
	}
	if i.cfg.Procs != nil {
		if n := i.cfg.Procs.UserName(uid); n != "" {
			return n
		}
	}
	return name
}

// parseTime reads the engine's RFC 3339 timestamps; the engine writes
// 0001-01-01T00:00:00Z for "never", which comes back as the zero time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}
