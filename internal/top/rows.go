package top

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/units"
)

// Group is what one row of the table stands for.
type Group int

// The groupings, in the order the group key steps through them.
const (
	ByContainer Group = iota
	ByUser
	ByProcess
)

var groupNames = []string{"container", "user", "process"}

func (g Group) String() string { return groupNames[g] }

// ParseGroup reads a grouping by name: container, user or process.
func ParseGroup(s string) (Group, error) {
	for i, n := range groupNames {
		if s == n {
			return Group(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not a grouping: use %s", s, strings.Join(groupNames, ", "))
}

// Column is a column of the table, which the rows may be sorted on.
type Column int

// The columns, left to right.
const (
	ColName Column = iota
	ColUser
	ColGPU
	ColSM
	ColMem
	ColCPU
	ColTime
	ColJob
	ColWaste
)

// columns are the table's columns: their names (as --sort takes them),
// headings, widths, and whether they sort largest first.
var columns = []struct {
	name, head string
	width      int
	right      bool
	desc       bool
}{
	{"name", "NAME", 26, false, false},
	{"user", "USER", 12, false, false},
	{"gpu", "GPU", 9, false, false},
	{"sm", "SM%", 6, true, true},
	{"mem", "GPU MEM", 10, true, true},
	{"cpu", "CPU", 6, true, true},
	{"time", "TIME", 9, true, true},
	{"job", "JOB", 14, false, false},
	{"waste", "WASTE", 16, false, true},
}

func (c Column) String() string { return columns[c].name }

// ColumnNames are the names --sort takes, in the table's order.
func ColumnNames() []string {
	out := make([]string, len(columns))
	for i, c := range columns {
		out[i] = c.name
	}
	return out
}

// GroupNames are the names --group takes.
func GroupNames() []string { return slices.Clone(groupNames) }

// ParseColumn reads a column by name, as the table's help line names
// them.
func ParseColumn(s string) (Column, error) {
	var names []string
	for i, c := range columns {
		if strings.EqualFold(s, c.name) {
			return Column(i), nil
		}
		names = append(names, c.name)
	}
	return 0, fmt.Errorf("%q is not a column: use %s", s, strings.Join(names, ", "))
}

// row is one line of the table.
type row struct {
	// key names what the row stands for across snapshots, so that the
	// selection and the detail view follow it as the rows move.
	key        string
	name, user string
	gpus       []int
	sm         float64
	mem        uint64
	cpu        float64       // cores; < 0: not known
	age        time.Duration // < 0: not known
	jobs       []string
	waste      []string // the rules of its active findings
	// detail is what the detail view shows besides the columns.
	detail []string
}

func (r *row) gpuText() string {
	if len(r.gpus) == 0 {
		return "-"
	}
	s := make([]string, len(r.gpus))
	for i, g := range r.gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

// cell is the text of column c of r.
func (r *row) cell(c Column) string {
	switch c {
	case ColName:
		return r.name
	case ColUser:
		return dash(r.user)
	case ColGPU:
		return r.gpuText()
	case ColSM:
		return strconv.FormatFloat(r.sm, 'f', 0, 64)
	case ColMem:
		return units.HumanSize(r.mem)
	case ColCPU:
		if r.cpu < 0 {
			return "-"
		}
		return strconv.FormatFloat(r.cpu, 'f', 2, 64)
	case ColTime:
		if r.age < 0 {
			return "-"
		}
		return ageText(r.age)
	case ColJob:
		return dash(strings.Join(r.jobs, ","))
	case ColWaste:
		return dash(strings.Join(r.waste, ","))
	}
	return ""
}

// less orders a before b on column c, in the column's own direction,
// reversed by rev; the key breaks ties so that the order is stable from
// one snapshot to the next.
func less(c Column, rev bool) func(a, b *row) int {
	return func(a, b *row) int {
		var n int
		switch c {
		case ColName, ColUser, ColJob, ColWaste:
			n = strings.Compare(a.cell(c), b.cell(c))
		case ColGPU:
			n = slices.Compare(a.gpus, b.gpus)
		case ColSM:
			n = cmp.Compare(a.sm, b.sm)
		case ColMem:
			n = cmp.Compare(a.mem, b.mem)
		case ColCPU:
			n = cmp.Compare(a.cpu, b.cpu)
		case ColTime:
			n = cmp.Compare(a.age, b.age)
		}
		if columns[c].desc != rev {
			n = -n
		}
		if c == ColWaste && n == 0 {
			// Rows without waste last, whatever the direction.
			n = cmp.Compare(len(b.waste), len(a.waste))
		}
		return cmp.Or(n, strings.Compare(a.key, b.key))
	}
}

// findings indexes the active waste findings by container and by owner.
type findings struct {
	byContainer map[string][]string
	byHost      map[string][]string
	byUser      map[string][]string
}

func indexFindings(rep *apitype.WasteReport) findings {
	f := findings{byContainer: map[string][]string{}, byHost: map[string][]string{}, byUser: map[string][]string{}}
	if rep == nil {
		return f
	}
	for _, fd := range rep.Findings {
		if !fd.Active {
			continue
		}
		switch fd.OwnerKind {
		case apitype.OwnerContainer:
			f.byContainer[fd.ContainerID] = addOnce(f.byContainer[fd.ContainerID], fd.Rule)
		case apitype.OwnerHost:
			f.byHost[fd.Owner] = addOnce(f.byHost[fd.Owner], fd.Rule)
		}
		if fd.Owner != "" {
			f.byUser[fd.Owner] = addOnce(f.byUser[fd.Owner], fd.Rule)
		}
	}
	return f
}

func addOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// buildRows makes the table's rows of snap, grouped by g, with the CPU
// use in cores of each container from cpu (by container ID).
func buildRows(snap *apitype.Snapshot, g Group, cpu map[string]float64) []row {
	fs := indexFindings(snap.Waste)
	ctrRows := containerRows(snap, cpu, fs)
	switch g {
	case ByUser:
		return userRows(ctrRows, fs)
	case ByProcess:
		return processRows(snap, cpu, fs)
	}
	return ctrRows
}

// shown says whether a container is a row: one on a GPU, or one running
// that asked for GPUs, as gpumeter ps lists them.
func shown(c *apitype.Container) bool {
	return len(c.GPUs) > 0 && c.Running || c.Running && c.GPURequest != ""
}

func containerRows(snap *apitype.Snapshot, cpu map[string]float64, fs findings) []row {
	var rows []row
	for i := range snap.Containers {
		c := &snap.Containers[i]
		if !shown(c) {
			continue
		}
		r := row{key: "c:" + c.ID, name: c.Name, user: c.User, cpu: -1, age: -1, waste: fs.byContainer[c.ID]}
		if v, ok := cpu[c.ID]; ok {
			r.cpu = v
		}
		if c.StartedAt != nil {
			r.age = snap.Time.Sub(*c.StartedAt)
		}
		if j := container.JobOf(c.Labels, snap.Node).On(snap.Node); j != "" {
			r.jobs = []string{j}
		}
		sharesInto(&r, c.GPUs)
		r.detail = append(r.detail,
			"container  "+c.ID,
			"image      "+dash(c.Image),
			"team       "+dash(c.Team)+"   project "+dash(c.Project),
			"GPU request "+gpuRequestWords(c.GPURequest),
			fmt.Sprintf("CPU time   %.1f s   RAM %s", c.CPUSeconds, units.HumanSize(c.MemoryBytes)))
		if c.StatsError != "" {
			r.detail = append(r.detail, "stats      "+c.StatsError)
		}
		r.detail = append(r.detail, shareLines(c.GPUs)...)
		rows = append(rows, r)
	}
	for i := range snap.HostUsers {
		h := &snap.HostUsers[i]
		r := row{key: "h:" + h.User, name: h.User + " (host)", user: h.User, cpu: -1, age: -1, waste: fs.byHost[h.User]}
		sharesInto(&r, h.GPUs)
		r.detail = append([]string{"processes of " + h.User + " outside containers"}, shareLines(h.GPUs)...)
		rows = append(rows, r)
	}
	for i := range snap.Unresolved {
		s := &snap.Unresolved[i]
		r := row{key: fmt.Sprintf("x:%d:%d", s.GPU, i), name: "(unknown owner)", cpu: -1, age: -1}
		sharesInto(&r, snap.Unresolved[i:i+1])
		r.detail = append([]string{"processes whose owner could not be found"}, shareLines(snap.Unresolved[i:i+1])...)
		rows = append(rows, r)
	}
	return rows
}

// sharesInto adds the GPU shares to r's GPUs, SM and memory.
func sharesInto(r *row, shares []apitype.GPUShare) {
	for _, s := range shares {
		if !slices.Contains(r.gpus, s.GPU) {
			r.gpus = append(r.gpus, s.GPU)
		}
		r.sm += s.SMPercent
		r.mem += s.MemoryBytes
	}
	slices.Sort(r.gpus)
}

// gpuRequestWords says what a container asked Docker for: the devices it
// names, by index ("0", which alone reads as a count) or UUID, or all.
func gpuRequestWords(req string) string {
	switch {
	case req == "":
		return "none"
	case req == "all":
		return "all GPUs"
	case strings.Trim(req, "0123456789,") != "":
		return req // UUIDs say what they are
	case strings.Contains(req, ","):
		return "GPUs " + req
	}
	return "GPU " + req
}

func shareLines(shares []apitype.GPUShare) []string {
	var out []string
	for _, s := range shares {
		procs := "processes"
		if s.Processes == 1 {
			procs = "process"
		}
		out = append(out, fmt.Sprintf("GPU %d  share %.2f  SM %.0f%%  memory %s  %d %s  allocated %.3f GPU-h  used %.3f GPU-h  energy %.4f kWh",
			s.GPU, s.Share, s.SMPercent, units.HumanSize(s.MemoryBytes), s.Processes, procs, s.AllocatedSeconds/3600, s.UsedSeconds/3600, s.EnergyJoules/3.6e6))
	}
	return out
}

func userRows(ctrRows []row, fs findings) []row {
	byUser := map[string]*row{}
	var order []string
	counts := map[string]int{}
	for i := range ctrRows {
		c := &ctrRows[i]
		if c.user == "" { // unresolved processes are nobody's
			continue
		}
		u, ok := byUser[c.user]
		if !ok {
			u = &row{key: "u:" + c.user, name: c.user, user: c.user, cpu: -1, age: -1, waste: fs.byUser[c.user]}
			byUser[c.user] = u
			order = append(order, c.user)
		}
		counts[c.user]++
		for _, g := range c.gpus {
			if !slices.Contains(u.gpus, g) {
				u.gpus = append(u.gpus, g)
			}
		}
		u.sm += c.sm
		u.mem += c.mem
		if c.cpu >= 0 {
			u.cpu = max(u.cpu, 0) + c.cpu
		}
		u.age = max(u.age, c.age) // the longest running
		u.jobs = append(u.jobs, c.jobs...)
		u.detail = append(u.detail, fmt.Sprintf("%-28s GPU %-9s SM %3.0f%%  memory %s", c.name, c.gpuText(), c.sm, units.HumanSize(c.mem)))
	}
	rows := make([]row, 0, len(order))
	for _, name := range order {
		u := byUser[name]
		slices.Sort(u.gpus)
		u.detail = append([]string{fmt.Sprintf("%d rows of %s:", counts[name], name)}, u.detail...)
		rows = append(rows, *u)
	}
	return rows
}

func processRows(snap *apitype.Snapshot, cpu map[string]float64, fs findings) []row {
	ctrs := map[string]*apitype.Container{}
	for i := range snap.Containers {
		ctrs[snap.Containers[i].ID] = &snap.Containers[i]
	}
	var rows []row
	for _, g := range snap.GPUs {
		for _, p := range g.Processes {
			r := row{key: fmt.Sprintf("p:%d:%d", g.Index, p.PID), gpus: []int{g.Index}, sm: p.SMPercent, mem: p.MemoryBytes, cpu: -1, age: -1}
			switch p.OwnerKind {
			case apitype.OwnerContainer:
				c, ok := ctrs[p.Owner]
				if !ok {
					r.name = fmt.Sprintf("%d %s", p.PID, container.ShortID(p.Owner))
					break
				}
				r.name, r.user, r.waste = fmt.Sprintf("%d %s", p.PID, c.Name), c.User, fs.byContainer[c.ID]
				if c.StartedAt != nil {
					r.age = snap.Time.Sub(*c.StartedAt)
				}
				if j := container.JobOf(c.Labels, snap.Node).On(snap.Node); j != "" {
					r.jobs = []string{j}
				}
				if v, ok := cpu[c.ID]; ok {
					r.cpu = v // the container's, which the process is part of
				}
			case apitype.OwnerHost:
				r.name, r.user, r.waste = fmt.Sprintf("%d (host)", p.PID), p.Owner, fs.byHost[p.Owner]
			default:
				r.name = fmt.Sprintf("%d (unknown)", p.PID)
			}
			r.detail = []string{
				fmt.Sprintf("PID %d  %s process on GPU %d (%s)", p.PID, p.Type, g.Index, g.UUID),
				fmt.Sprintf("owner %s %s", p.OwnerKind, dash(p.Owner)),
				fmt.Sprintf("SM %.0f%%  memory %s", p.SMPercent, units.HumanSize(p.MemoryBytes)),
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ageText writes d as top does: minutes and seconds under an hour, then
// hours and minutes, then days and hours.
func ageText(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 3600:
		return fmt.Sprintf("%d:%02d", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}
