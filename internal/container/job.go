package container

import (
	"errors"
	"time"

	mcontainer "github.com/moby/moby/api/types/container"
)

// ErrExists is wrapped by the error of a create whose container name is
// taken: a queue job's container was created before.
var ErrExists = errors.New("container exists")

// ErrUnavailable is wrapped by the error of an action that failed because
// the container runtime could not be reached or answered that it could
// not serve (a connection error, a 503, a 500 while it stops answering):
// the runtime's fault, not the container's, and worth trying again once
// it answers.
var ErrUnavailable = errors.New("container runtime unavailable")

// JobContainer is the container of a queue job as its runtime reports it,
// in any state: created, running or exited. It is the engine's view of a
// container, not a shape of the job (queue.Job): the queue's runtime
// matches the two by JobID.
type JobContainer struct {
	ID   string
	Name string // without the leading slash
	// JobID is the value of the container's gpumeter.job label.
	JobID string
	// Running is true while its process runs; Exited once it has run and
	// stopped (a created container that never started is neither).
	Running, Exited bool
	ExitCode        int
	OOMKilled       bool
	StartedAt       time.Time // zero when it never started
	FinishedAt      time.Time // zero while it runs or never ran
	// Mounts are the mounts as the runtime made them, for spec.Verify.
	Mounts []mcontainer.MountPoint
	// GPUs are the GPUs the runtime gives it, as its spec asked for them
	// (the queue's specs name GPU UUIDs).
	GPUs GPURequest
}
