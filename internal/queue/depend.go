package queue

import (
	"fmt"
	"slices"
	"strings"
)

// DependencyType is the condition a dependency sets on the job it names.
type DependencyType string

// The conditions of --after, as Slurm's afterok, afterany and afternotok.
const (
	// AfterOK: the job named must have succeeded.
	AfterOK DependencyType = "ok"
	// AfterAny: the job named must have ended, however it ended.
	AfterAny DependencyType = "any"
	// AfterFail: the job named must have ended other than succeeded.
	AfterFail DependencyType = "fail"
)

// DependencyTypes are the conditions --after takes, in the order the
// documentation names them.
var DependencyTypes = []DependencyType{AfterOK, AfterAny, AfterFail}

// ParseDependencyType reads ok, any or fail.
func ParseDependencyType(s string) (DependencyType, error) {
	t := DependencyType(s)
	if !slices.Contains(DependencyTypes, t) {
		return "", fmt.Errorf("%q is not a dependency type; use ok, any or fail", s)
	}
	return t, nil
}

// Dependency is one job a job waits for, and on what condition. ID is a
// job's id or an array's, which stands for every task of the array.
type Dependency struct {
	Type DependencyType
	ID   string
}

// String is the dependency as --after takes it: ok:j-000012.
func (d Dependency) String() string { return string(d.Type) + ":" + d.ID }

// ParseAfter reads --after values, each TYPE:ID[,ID...] (ok:j-000012,j-000013),
// into dependencies without repeats. It checks their shape only; whether
// the jobs exist and may be named is the submitter's check.
func ParseAfter(values []string) ([]Dependency, error) {
	var out []Dependency
	for _, v := range values {
		typ, ids, ok := strings.Cut(strings.TrimSpace(v), ":")
		if !ok {
			return nil, fmt.Errorf("%q is not TYPE:ID; give a dependency such as ok:j-000012 (types ok, any, fail)", v)
		}
		t, err := ParseDependencyType(typ)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", v, err)
		}
		for _, id := range strings.Split(ids, ",") {
			id = strings.TrimSpace(id)
			if id == "" {
				return nil, fmt.Errorf("%q names an empty job id; give ids such as ok:j-000012,j-000013", v)
			}
			if strings.ContainsAny(id, " \t\n:/") || len(id) > 64 {
				return nil, fmt.Errorf("%q: %q is not a job id", v, id)
			}
			d := Dependency{Type: t, ID: id}
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	if len(out) > MaxDependencies {
		return nil, fmt.Errorf("%d dependencies; a job may wait on at most %d", len(out), MaxDependencies)
	}
	return out, nil
}

// MaxDependencies is the most jobs one job may wait on.
const MaxDependencies = 100

// ArrayTask is a job's place in an array job: the array's id, the task's
// index, how many tasks the array has, and how many of them may run at
// once (0: no cap).
type ArrayTask struct {
	ID         string
	Index      int
	Count      int
	MaxRunning int
}

// MaxArrayTasks is the most tasks one array may have.
const MaxArrayTasks = 10000
