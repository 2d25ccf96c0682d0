package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// envStore keeps the jobs' environment values, which the ledger never
// holds, in Config.EnvDir: one 0600 file a job, in a 0700 directory. The
// service writes a job's at submit, the launcher reads it at start, and
// at the job's end it is kept as ID.env.ended for keep (queue.log_retention,
// as long as the job's container, whose config holds the same values),
// so that gpumeter requeue can make the job again; keep 0 removes it at
// the end. Its state is the directory: each file is written once and
// renamed in place; mu guards only when the next sweep is due.
type envStore struct {
	dir  string
	log  *slog.Logger
	now  func() time.Time
	keep time.Duration

	mu  sync.Mutex
	due time.Time // the earliest an ended file expires; zero: sweep at once
}

// endedSuffix marks the values of an ended job, kept for requeue.
const endedSuffix = ".ended"

// path is where job id's environment values are kept.
func (e *envStore) path(id string) string { return filepath.Join(e.dir, id+".env") }

// writeTemp writes env to a new temporary file in the store, readable by
// the agent only, and returns its path; "" when env is empty.
func (e *envStore) writeTemp(env []string) (string, error) {
	if len(env) == 0 {
		return "", nil
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(e.dir, ".submit-*.tmp")
	if err != nil {
		return "", fmt.Errorf("keep the job's environment: %w", err)
	}
	name := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("keep the job's environment: %w", err)
	}
	return name, nil
}

// errEnvMissing is why a job with environment keys cannot start without
// its env file.
var errEnvMissing = errors.New("its environment values are missing from the queue's env dir (the agent stopped while the job was submitted); submit it again")

// read returns job j's environment, checked against its keys.
func (e *envStore) read(j queue.Job) ([]string, error) {
	if len(j.EnvKeys) == 0 {
		return nil, nil
	}
	b, err := os.ReadFile(e.path(j.ID))
	if errors.Is(err, os.ErrNotExist) && j.State.Ended() {
		// An ended job's, kept for gpumeter requeue.
		b, err = os.ReadFile(e.path(j.ID) + endedSuffix)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, errEnvMissing
	}
	if err != nil {
		return nil, fmt.Errorf("read its environment: %w", err)
	}
	var env []string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("read its environment %s: %w", e.path(j.ID), err)
	}
	if len(env) != len(j.EnvKeys) {
		return nil, fmt.Errorf("its environment file %s has %d variables, the job %d", e.path(j.ID), len(env), len(j.EnvKeys))
	}
	return env, nil
}

// remove puts an ended job's environment values aside for keep, or
// drops them when keep is 0.
func (e *envStore) remove(id string) {
	if e.keep <= 0 {
		if err := os.Remove(e.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("remove an ended job's environment", "job", id, "err", err)
		}
		return
	}
	ended := e.path(id) + endedSuffix
	err := os.Rename(e.path(id), ended)
	if errors.Is(err, os.ErrNotExist) {
		return // it had none
	}
	if err == nil {
		// Its age counts from the end, not from the submission.
		now := e.now()
		err = os.Chtimes(ended, now, now)
		e.mu.Lock()
		if e.due.IsZero() || now.Add(e.keep).Before(e.due) {
			e.due = now.Add(e.keep)
		}
		e.mu.Unlock()
	}
	if err != nil {
		e.log.Warn("keep an ended job's environment for requeue", "job", id, "err", err)
		_ = os.Remove(e.path(id))
	}
}

// sweep removes the ended jobs' values older than keep, once one is due,
// and returns when the next is (zero: none kept).
func (e *envStore) sweep() time.Time {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.due.IsZero() && now.Before(e.due) {
		return e.due
	}
	e.due = time.Time{}
	ms, _ := filepath.Glob(filepath.Join(e.dir, "*.env"+endedSuffix))
	for _, m := range ms {
		fi, err := os.Stat(m)
		if err != nil {
			continue
		}
		expires := fi.ModTime().Add(e.keep)
		if !now.Before(expires) {
			if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
				e.log.Warn("remove an ended job's environment", "file", m, "err", err)
			}
			continue
		}
		if e.due.IsZero() || expires.Before(e.due) {
			e.due = expires
		}
	}
	return e.due
}

// cleanTemps removes temporary env files older than age: left by a crash
// during a submit, their job (if it was stored) fails at start.
func (e *envStore) cleanTemps(age time.Duration) {
	ms, _ := filepath.Glob(filepath.Join(e.dir, ".submit-*.tmp"))
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil && e.now().Sub(fi.ModTime()) > age {
			_ = os.Remove(m)
		}
	}
}
