package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// ArraySpec is an --array value read: the tasks' indices in the order
// given, and how many of them may run at once (0: no cap).
type ArraySpec struct {
	Indices    []int
	MaxRunning int
}

// MaxArrayIndex is the highest index a task may have, as Slurm's
// MaxArraySize bounds its indices.
const MaxArrayIndex = 1_000_000

// String is the spec as --array takes it, with its ranges folded:
// 0-99%8, 1,3,5.
func (a ArraySpec) String() string {
	return FormatArray(a.Indices, a.MaxRunning)
}

// FormatArray writes indices (in the order given) as --array takes them,
// runs of consecutive indices as ranges, and %max when max is not 0.
func FormatArray(indices []int, max int) string {
	var b strings.Builder
	for i := 0; i < len(indices); {
		j := i
		for j+1 < len(indices) && indices[j+1] == indices[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(indices[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(indices[j]))
		}
		i = j + 1
	}
	if max > 0 {
		b.WriteString("%" + strconv.Itoa(max))
	}
	return b.String()
}

// ParseArray reads an --array value in Slurm's common forms: a range
// (0-99), a range with a step (0-99:4), a list (1,3,5) or a list of
// these (0-9,20,30-39), each optionally ending in %N, at most N tasks
// running at once. Indices are 0 to MaxArrayIndex, each given once, and
// an array has 1 to MaxArrayTasks tasks.
func ParseArray(s string) (ArraySpec, error) {
	const forms = "give a range (0-99), a list (1,3,5), a range with a step (0-99:4), or any of these with %N to run at most N at once (0-99%8)"
	if strings.TrimSpace(s) == "" {
		return ArraySpec{}, fmt.Errorf("the array is empty; %s", forms)
	}
	var out ArraySpec
	body, capText, hasCap := strings.Cut(s, "%")
	if hasCap {
		n, err := strconv.Atoi(capText)
		if err != nil || n < 1 {
			return ArraySpec{}, fmt.Errorf("%q: %%%s is not a number of tasks of 1 or more; give %%N, at most N tasks running at once, such as 0-99%%8", s, capText)
		}
		out.MaxRunning = n
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(body, ",") {
		first, last, step, err := arrayPart(part)
		if err != nil {
			return ArraySpec{}, fmt.Errorf("%q: %w; %s", s, err, forms)
		}
		for i := first; i <= last; i += step {
			if seen[i] {
				return ArraySpec{}, fmt.Errorf("%q names index %d twice; give each index once", s, i)
			}
			if len(out.Indices) == MaxArrayTasks {
				return ArraySpec{}, fmt.Errorf("%q has more than %d tasks, the most an array may have; split it into arrays of at most %d", s, MaxArrayTasks, MaxArrayTasks)
			}
			seen[i] = true
			out.Indices = append(out.Indices, i)
		}
	}
	if out.MaxRunning > len(out.Indices) {
		out.MaxRunning = 0 // a cap above the count caps nothing
	}
	return out, nil
}

// arrayPart reads one element of an --array list: N, N-M or N-M:S.
func arrayPart(part string) (first, last, step int, err error) {
	idx := func(s string) (int, error) {
		if s == "" || strings.TrimLeft(s, "0123456789") != "" {
			return 0, fmt.Errorf("%q is not an index (0 to %d)", s, MaxArrayIndex)
		}
		n, err := strconv.Atoi(s)
		if err != nil || n > MaxArrayIndex {
			return 0, fmt.Errorf("index %s is over %d, the highest an array may use", s, MaxArrayIndex)
		}
		return n, nil
	}
	rng, stepText, hasStep := strings.Cut(part, ":")
	a, b, isRange := strings.Cut(rng, "-")
	if first, err = idx(a); err != nil {
		return 0, 0, 0, err
	}
	last, step = first, 1
	if isRange {
		if last, err = idx(b); err != nil {
			return 0, 0, 0, err
		}
		if last < first {
			return 0, 0, 0, fmt.Errorf("range %s ends before it begins", rng)
		}
	}
	if hasStep {
		if !isRange {
			return 0, 0, 0, fmt.Errorf("%q has a step but no range; a step follows a range, as 0-99:4", part)
		}
		if step, err = strconv.Atoi(stepText); err != nil || step < 1 || strings.TrimLeft(stepText, "0123456789") != "" {
			return 0, 0, 0, fmt.Errorf("step %q is not a number of 1 or more", stepText)
		}
	}
	return first, last, step, nil
}

// arrayState is what a pass knows of one array job: how many of its
// tasks hold GPUs, counting this pass's starts, and its cap's sentence
// once made.
type arrayState struct {
	running int
	text    string
}

// runningArrays counts the running tasks of each array; nil when no
// running job is a task.
func runningArrays(running []RunningJob) map[string]*arrayState {
	var out map[string]*arrayState
	for _, r := range running {
		if r.Array == "" {
			continue
		}
		if out == nil {
			out = map[string]*arrayState{}
		}
		a := out[r.Array]
		if a == nil {
			a = &arrayState{}
			out[r.Array] = a
		}
		a.running++
	}
	return out
}

// arrayRefuse says why task j of a capped array may not start: its
// array already runs ArrayMax tasks (array_limit). Such a task does not
// hold up the jobs behind it, as too_big does not.
func (p *pass) arrayRefuse(j rankedJob) (Reason, string) {
	if j.Array == "" || j.ArrayMax <= 0 {
		return "", ""
	}
	a := p.arrays[j.Array]
	if a == nil || a.running < j.ArrayMax {
		return "", ""
	}
	if a.text == "" {
		a.text = fmt.Sprintf("%d of array %s's tasks run, its limit (%%%d); this task starts when one of them ends", a.running, j.Array, j.ArrayMax)
	}
	return ReasonArrayLimit, a.text
}

// arrayStarted counts a task started by this pass against its array.
func (p *pass) arrayStarted(j rankedJob) {
	if j.Array == "" {
		return
	}
	if p.arrays == nil {
		p.arrays = map[string]*arrayState{}
	}
	a := p.arrays[j.Array]
	if a == nil {
		a = &arrayState{}
		p.arrays[j.Array] = a
	}
	a.running++
	a.text = ""
}
