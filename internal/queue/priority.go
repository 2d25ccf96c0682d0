package queue

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The order of the queue: each job's priority from its owner's fair share,
// its age and its class, highest first, first submitted first among equals.

// Class is the priority class a job is submitted with.
type Class string

// The classes. The empty class is normal.
const (
	ClassLow    Class = "low"
	ClassNormal Class = "normal"
	ClassHigh   Class = "high"
)

// ParseClass returns the class named s ("" is ClassNormal), or an error
// naming the classes. Who may submit ClassHigh is checked at submit.
func ParseClass(s string) (Class, error) {
	switch Class(s) {
	case "", ClassNormal:
		return ClassNormal, nil
	case ClassLow, ClassHigh:
		return Class(s), nil
	}
	return "", fmt.Errorf("unknown priority %q (priorities: low, normal, high)", s)
}

// Value is the class's term of the priority: low 0, normal 0.5, high 1.
// An unknown class counts as normal.
func (c Class) Value() float64 {
	switch c {
	case ClassLow:
		return 0
	case ClassHigh:
		return 1
	}
	return 0.5
}

// Weights weigh the three terms of a job's priority
// (queue.priority.weights).
type Weights struct {
	// FairShare weighs the owner's fair-share factor, in (0, 1].
	FairShare float64
	// Age weighs the age factor, min(1, waited/AgeMax).
	Age float64
	// Class weighs the class value: low 0, normal 0.5, high 1.
	Class float64
}

// DefaultWeights are used where all three weights are 0 (the config
// refuses that; code that builds a Config by hand may leave them out): the
// order is by fair share alone, and FIFO among equal factors.
var DefaultWeights = Weights{FairShare: 1}

// DefaultAgeMax is the wait after which a job's age factor is 1.
const DefaultAgeMax = 7 * 24 * time.Hour

// FairShareFactor is Slurm's classic fair-share factor
// 2^(−(usage/totalUsage)/(share/totalShares)): 1 for a user who used
// nothing, 0.5 for one whose part of the usage equals their part of the
// shares, towards 0 the more they used beyond it. usage and totalUsage are
// decayed GPU-hours, share and totalShares the configured shares. A
// totalUsage of 0 gives 1 (nobody used anything), a share of 0 with usage
// gives 0 (the config refuses shares of 0).
func FairShareFactor(usage, share, totalUsage, totalShares float64) float64 {
	if usage <= 0 || totalUsage <= 0 {
		return 1
	}
	if share <= 0 || totalShares <= 0 {
		return 0
	}
	return math.Exp2(-(usage / totalUsage) / (share / totalShares))
}

// Ranked is a queued job's place in the order of a pass.
type Ranked struct {
	// JobID is the job.
	JobID string
	// Priority is its priority (see Schedule).
	Priority float64
	// Position is its place among the queued jobs, 1 first.
	Position int
}

// weights returns the weights in force.
func (c Config) weights() Weights {
	if c.Weights == (Weights{}) {
		return DefaultWeights
	}
	return c.Weights
}

// ageMax returns the wait after which the age factor is 1.
func (c Config) ageMax() time.Duration {
	if c.AgeMax > 0 {
		return c.AgeMax
	}
	return DefaultAgeMax
}

// Priority returns job j's priority in a pass over in.
func Priority(in Input, j QueuedJob) float64 {
	return priority(in.Config.weights(), in.Config.ageMax(), in, &j)
}

func priority(w Weights, ageMax time.Duration, in Input, j *QueuedJob) float64 {
	fs, ok := in.FairShare[j.User]
	if !ok {
		fs = 1
	}
	age := float64(in.Now.Sub(j.SubmittedAt)) / float64(ageMax)
	age = min(1, max(0, age))
	return w.FairShare*fs + w.Age*age + w.Class*j.Class.Value()
}

// rankedJob is a queued job with its priority.
type rankedJob struct {
	*QueuedJob
	priority float64
	at       int64 // SubmittedAt in Unix nanoseconds, for the sort
}

// queueOrder returns the queued jobs by priority, highest first, then
// first submitted, then by id, leaving in untouched.
func queueOrder(in Input) []rankedJob {
	w, ageMax := in.Config.weights(), in.Config.ageMax()
	order := make([]rankedJob, len(in.Queued))
	for i := range in.Queued {
		j := &in.Queued[i]
		order[i] = rankedJob{j, priority(w, ageMax, in, j), j.SubmittedAt.UnixNano()}
	}
	slices.SortFunc(order, func(a, b rankedJob) int {
		if a.priority != b.priority {
			if a.priority > b.priority {
				return -1
			}
			return 1
		}
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return order
}
