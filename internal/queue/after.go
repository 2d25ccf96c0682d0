package queue

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DependencyStatus is where a job's dependencies stand.
type DependencyStatus int

const (
	// DependencyWaiting: a job named has not ended yet, so the condition
	// may still be met.
	DependencyWaiting DependencyStatus = iota
	// DependencyMet: every job named ended as the condition asks.
	DependencyMet
	// DependencyNever: a job named ended in a way the condition can no
	// longer be met by, or is not known to the queue.
	DependencyNever
)

// Meets says what a job named by a dependency of type t, in state s,
// makes of it: waiting while s is live, met or never once it ended. An
// unknown state (a damaged row) can never meet a condition.
func (t DependencyType) Meets(s State) DependencyStatus {
	if !s.Valid() {
		return DependencyNever
	}
	if !s.Ended() {
		return DependencyWaiting
	}
	ok := false
	switch t {
	case AfterOK:
		ok = s == Succeeded
	case AfterAny:
		ok = true
	case AfterFail:
		ok = s != Succeeded
	}
	if ok {
		return DependencyMet
	}
	return DependencyNever
}

// wants is what the condition of t asks of a job, for a sentence.
func (t DependencyType) wants() string {
	switch t {
	case AfterOK:
		return "succeed"
	case AfterFail:
		return "fail"
	}
	return "end"
}

// DependedJob is a job a dependency names as the launcher sees it: its
// state, or, for an array, the states of its tasks. Known is false for
// an id the queue does not have.
type DependedJob struct {
	Known bool
	// State is the job's state; for an array, unused.
	State State
	// Reason is how the job ended, for the sentence.
	Reason Reason
	// Tasks are an array's tasks' states by task id; nil for a job of
	// its own. Count is how many tasks the array has.
	Tasks map[string]State
	Count int
}

// DependencyCheck is the verdict on one job's dependencies and the
// sentence that says it: what it waits for, or what can no longer be
// met.
type DependencyCheck struct {
	Status DependencyStatus
	Text   string
}

// CheckDependencies evaluates deps against the jobs they name, as look
// finds them. The job can never start when one dependency can never be
// met; it waits while one has not been decided; otherwise they are met.
// An array stands for all of its tasks: met when every task met the
// condition, never when one cannot.
func CheckDependencies(deps []Dependency, look func(id string) DependedJob) DependencyCheck {
	var waiting []string
	for _, d := range deps {
		dj := look(d.ID)
		if !dj.Known {
			return DependencyCheck{Status: DependencyNever,
				Text: fmt.Sprintf("%s is no longer known to the queue, so it cannot %s (--after %s)", d.ID, d.Type.wants(), d)}
		}
		if dj.Tasks == nil {
			switch d.Type.Meets(dj.State) {
			case DependencyNever:
				how := string(dj.State)
				if dj.Reason != "" {
					how += " (" + string(dj.Reason) + ")"
				}
				return DependencyCheck{Status: DependencyNever,
					Text: fmt.Sprintf("%s ended %s and this job was to run after it would %s (--after %s)", d.ID, how, d.Type.wants(), d)}
			case DependencyWaiting:
				waiting = append(waiting, fmt.Sprintf("%s to %s (%s)", d.ID, d.Type.wants(), dj.State))
			}
			continue
		}
		ended := 0
		for _, id := range sortedTasks(dj.Tasks) {
			s := dj.Tasks[id]
			switch d.Type.Meets(s) {
			case DependencyNever:
				return DependencyCheck{Status: DependencyNever,
					Text: fmt.Sprintf("task %s of array %s ended %s and this job was to run after every task would %s (--after %s)", id, d.ID, s, d.Type.wants(), d)}
			case DependencyMet:
				ended++
			}
		}
		count := max(dj.Count, len(dj.Tasks))
		if ended < count {
			waiting = append(waiting, fmt.Sprintf("every task of %s to %s (%d of %d done)", d.ID, d.Type.wants(), ended, count))
		}
	}
	switch len(waiting) {
	case 0:
		return DependencyCheck{Status: DependencyMet}
	case 1:
		return DependencyCheck{Text: "waiting for " + waiting[0]}
	}
	return DependencyCheck{Text: "waiting for " + waiting[0] + " and " + strconv.Itoa(len(waiting)-1) + " more (--after)"}
}

// sortedTasks are an array's task ids in index order, so that the
// sentence names the lowest task that cannot meet the condition.
func sortedTasks(tasks map[string]State) []string {
	ids := make([]string, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, id)
	}
	index := func(id string) int {
		i, err := strconv.Atoi(id[strings.LastIndexByte(id, '_')+1:])
		if err != nil {
			return -1
		}
		return i
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(index(a), index(b)), strings.Compare(a, b)) })
	return ids
}

// DependencyWait is the wait of a queued job whose dependencies are not
// met yet, with the sentence CheckDependencies gave.
func DependencyWait(jobID, text string) Wait {
	return Wait{JobID: jobID, Reason: ReasonDependency, figures: waitFigures{text: text}}
}
