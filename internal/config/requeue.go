package config

import (
	"fmt"
	"slices"
	"strings"
)

// RequeueCause is a cause queue.requeue_on may name: what, befalling a
// running job, puts it back in the queue rather than ending it.
type RequeueCause string

// The causes of a requeue. Failed (a non-zero exit) is not among them:
// a job asks for it itself, with submit --requeue.
const (
	// RequeueLost: the job's container vanished with no exit code
	// (counted against queue.max_requeue).
	RequeueLost RequeueCause = "lost"
	// RequeueEngineFailure: the Docker engine killed the job's container
	// as it stopped (no requeue counted: not the job's fault).
	RequeueEngineFailure RequeueCause = "engine_failure"
	// RequeueNodeFailure: the node the job ran on went away; accepted for
	// the fleet to come, and never seen on one host.
	RequeueNodeFailure RequeueCause = "node_failure"
)

// RequeueCauses are the causes queue.requeue_on takes, its default.
var RequeueCauses = []RequeueCause{RequeueLost, RequeueEngineFailure, RequeueNodeFailure}

// ParseRequeueCause reads a queue.requeue_on entry.
func ParseRequeueCause(s string) (RequeueCause, error) {
	c := RequeueCause(s)
	if slices.Contains(RequeueCauses, c) {
		return c, nil
	}
	names := make([]string, len(RequeueCauses))
	for i, c := range RequeueCauses {
		names[i] = string(c)
	}
	if s == "failed" {
		return "", fmt.Errorf("%q is asked for per job, with gpumeter submit --requeue; queue.requeue_on names %s", s, strings.Join(names, ", "))
	}
	return "", fmt.Errorf("%q is not a requeue cause; name %s", s, strings.Join(names, ", "))
}
