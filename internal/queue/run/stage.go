package run

import (
	"errors"
	"fmt"

	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/queue/stage"
)

// noStageDir is why a queue without Config.StageDir refuses mounts.
const noStageDir = "this agent has no staging directory for job mounts; submit without mounts"

// mountRefusal is the refusal of a request with mounts on an agent that
// cannot stage them, or nil.
func (q *Service) mountRefusal(req spec.Request) error {
	if len(req.Mounts) == 0 || q.stageRefusal == "" {
		return nil
	}
	return &spec.Refusal{Reason: spec.MountNotAllowed, Field: "mounts", Text: q.stageRefusal}
}

// stageMounts opens each of s's mount sources beneath its root, by
// descriptor and without following symlinks, binds it into job j's
// staging directory and points s at the staging path, which is all
// Docker ever sees: runc re-resolves a source by name at start, and a
// name under a user's root is the user's to swap. What an earlier try of
// this start left staged goes first.
func (q *Launcher) stageMounts(j queue.Job, s *spec.Spec) error {
	mounts := s.HostConfig.Mounts
	if len(mounts) == 0 {
		return nil
	}
	if q.stageRefusal != "" {
		return errors.New(q.stageRefusal)
	}
	who, err := q.identity(j.User)
	if err != nil {
		return fmt.Errorf("user %s is no longer known to this host (host.passwd_file): %w", j.User, err)
	}
	roots := q.settings.mountRoots()
	if err := q.stage.Unstage(j.ID); err != nil {
		return err
	}
	for i := range mounts {
		m := &mounts[i]
		src, err := spec.OpenSource(m.Source, roots, who, !m.ReadOnly)
		if err != nil {
			q.unstage(j.ID)
			return err
		}
		p, err := q.stage.Bind(j.ID, i, src.FD(), src.Dir, m.ReadOnly)
		src.Close()
		if err != nil {
			q.unstage(j.ID)
			return err
		}
		m.Source = p
	}
	return nil
}

// unstage detaches what job id has staged, if anything.
func (q *Launcher) unstage(id string) {
	if q.stage == nil {
		return
	}
	if err := q.stage.Unstage(id); err != nil {
		q.log.Error("unstage a job's mounts", "job", id, "err", err)
	}
}

// unstageEnded unstages every staged job that is not starting or
// running (active): those that ended while the agent was down, or whose
// unstage failed before.
func (q *Launcher) unstageEnded(active map[string]bool) {
	if q.stage == nil {
		return
	}
	jobs, err := q.stage.Jobs()
	if err != nil {
		q.log.Error("list staged jobs", "err", err)
		return
	}
	for _, id := range jobs {
		if !active[id] {
			q.unstage(id)
		}
	}
}

// openStage opens the staging directory of cfg, and says why mounts are
// refused when there is none or the agent cannot stage.
func openStage(cfg Config) (*stage.Dir, string, error) {
	if cfg.StageDir == "" {
		return nil, noStageDir, nil
	}
	d, err := stage.Open(cfg.StageDir)
	if err != nil {
		return nil, "", fmt.Errorf("queue: %w", err)
	}
	return d, cfg.StageRefusal, nil
}
