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
	return priorityOf(w, ageMax, in.Now, fs, j)
}

// priorityOf is the priority of j, whose user's fair-share factor is fs.
func priorityOf(w Weights, ageMax time.Duration, now time.Time, fs float64, j *QueuedJob) float64 {
	age := float64(now.Sub(j.SubmittedAt)) / float64(ageMax)
	age = min(1, max(0, age))
	return w.FairShare*fs + w.Age*age + w.Class*j.Class.Value()
}

// rankedJob is a queued job with its priority, its user and its team.
type rankedJob struct {
	*QueuedJob
	priority float64
	jobHolders
	// scope is where the job may run (its constraints, drained nodes).
	scope *scope
}

// queueOrder returns the keys of the queued jobs (see orderKey) by
// priority, highest first, then first submitted, then by id, leaving in
// untouched; fairShare(i) is the fair-share factor of in.Queued[i]'s
// user. The first two are
// one 128-bit key, sorted by radix (see sortKeys): at 10,000 jobs a
// comparison sort's unpredictable branches cost several times as much.
func queueOrder(in Input, fairShare func(i int) float64) []orderKey {
	w, ageMax := in.Config.weights(), in.Config.ageMax()
	n := len(in.Queued)
	buf := make([]orderKey, 2*n)
	keys := buf[:n]
	for i := range in.Queued {
		j := &in.Queued[i]
		keys[i] = orderKey{priority: priorityOf(w, ageMax, in.Now, fairShare(i), j), at: j.SubmittedAt.UnixNano(), i: i}
	}
	keys = sortKeys(keys, buf[n:])
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && keys[hi].priority == keys[lo].priority && keys[hi].at == keys[lo].at {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(keys[lo:hi], func(a, b orderKey) int { return strings.Compare(in.Queued[a.i].ID, in.Queued[b.i].ID) })
		}
		lo = hi
	}
	return preemptibleLast(in, keys)
}

// orderKey is what the queue's order sorts by: a job's priority, its
// SubmittedAt in Unix nanoseconds and its index in Input.Queued.
type orderKey struct {
	priority float64
	at       int64
	i        int
}

// word returns byte b (0 lowest) of the key as one 128-bit unsigned
// number whose order is the queue's: the priority, descending, above
// SubmittedAt, ascending.
func (k *orderKey) word(b int) byte {
	if b < 8 {
		return byte((uint64(k.at) ^ 1<<63) >> (8 * b))
	}
	return byte(descending(k.priority) >> (8 * (b - 8)))
}

// descending maps f to a number whose unsigned order is f's, reversed
// (-0 as 0).
func descending(f float64) uint64 {
	if f == 0 {
		f = 0
	}
	u := math.Float64bits(f)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return ^u
}

// sortKeys sorts keys by the priority, descending, then by SubmittedAt,
// stably: a least-significant-byte radix sort, one counting scan for all
// sixteen bytes and a pass for each byte that is not the same in every
// key. tmp is as long as keys; it returns whichever holds the result.
func sortKeys(keys, tmp []orderKey) []orderKey {
	if len(keys) < 2 {
		return keys
	}
	var counts [16][256]uint32
	for k := range keys {
		key := &keys[k]
		at, pr := uint64(key.at)^1<<63, descending(key.priority)
		for b := range 8 {
			counts[b][byte(at>>(8*b))]++
			counts[8+b][byte(pr>>(8*b))]++
		}
	}
	src, dst := keys, tmp
	for b := range 16 {
		c := &counts[b]
		if int(c[src[0].word(b)]) == len(src) {
			continue // every key has this byte
		}
		var sum uint32
		for d := range c {
			c[d], sum = sum, sum+c[d]
		}
		for k := range src {
			d := src[k].word(b)
			dst[c[d]] = src[k]
			c[d]++
		}
		src, dst = dst, src
	}
	return src
}
