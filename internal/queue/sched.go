package queue

import (
	"fmt"
	"slices"
	"time"
)

// Defaults of the scheduler's settings, used where Config leaves a field
// at its zero value.
const (
	// DefaultMaxGPUsPerUser is queue.max_gpus_per_user's default.
	DefaultMaxGPUsPerUser = 4
	// DefaultOutsideMemoryThreshold is queue.outside_memory_threshold's
	// default: a GPU with more than 5% of its memory used by processes
	// outside the queue is not free.
	DefaultOutsideMemoryThreshold = 0.05
)

// Placement says which free GPUs a job is given.
type Placement string

// The placements (Target is with the placement by utilisation).
const (
	// Binpack (the default) fills GPUs next to busy ones first, lowest
	// index first, so that whole free blocks stay for multi-GPU jobs; a
	// memory job goes to the fullest shared GPU it fits on.
	Binpack Placement = "binpack"
	// Spread takes GPUs away from busy ones first, lowest index first,
	// so that jobs share as little as possible (PCIe, power, heat); a
	// memory job goes to the emptiest shared GPU.
	Spread Placement = "spread"
)

// PlacementNames are the placements' names, the default first: the one
// list settings check queue.placement against.
func PlacementNames() []string { return []string{string(Binpack), string(Spread), string(Target)} }

// ParsePlacement returns the placement named s ("" is Binpack), or an
// error naming the placements.
func ParsePlacement(s string) (Placement, error) {
	switch Placement(s) {
	case "", Binpack:
		return Binpack, nil
	case Spread, Target:
		return Placement(s), nil
	}
	return "", fmt.Errorf("unknown placement %q (placements: binpack, spread, target)", s)
}

// QueuedJob is a job in state queued.
type QueuedJob struct {
	// ID is the job's id, such as j-000123; it breaks ties of SubmittedAt.
	ID string
	// User and Team are the submitter's.
	User, Team string
	// GPUs is the number of whole GPUs the job asks for; 0 for a memory
	// job.
	GPUs int
	// GPUMemory, when not 0, is the memory in bytes the job asks for on
	// one shared GPU instead of whole GPUs (GPUs is then 0).
	GPUMemory uint64
	// Class is the job's priority class ("" is normal).
	Class Class
	// TimeLimit is the job's time limit; 0 means none is known, and the
	// job may then only backfill on GPUs no reservation needs.
	TimeLimit time.Duration
	// SubmittedAt orders jobs of equal priority (first submitted, first
	// served) and gives the age factor.
	SubmittedAt time.Time
	// Held jobs keep their place and do not start.
	Held bool
	// Preemptible jobs queue behind every job that is not, may start on
	// GPUs the head job reserves until it may preempt, and never preempt
	// (see Preemption).
	Preemptible bool
	// Preempted says the job's last run gave its GPUs up (its stored
	// reason is preempted): while it waits for GPUs its reason stays so.
	Preempted bool
	// Array is the array job the job is a task of ("" for none), and
	// ArrayMax how many of its tasks may hold GPUs at once (0: no cap).
	Array    string
	ArrayMax int
	// Image is the job's image, which a fleet places only on the nodes
	// whose image allowlist takes it (Input.NodeImages).
	Image string
	// Node is a glob (path.Match syntax, see ValidNodeGlob) on the name
	// of the node the job must run on: one name (--node NAME) or a
	// pattern; "" is any node.
	Node string
	// Model is a glob on GPU.Model: the job takes only GPUs whose model
	// matches (--model GLOB); "" is any model.
	Model string
}

// RunningJob is a job that holds GPUs: starting or running.
type RunningJob struct {
	// ID is the job's id.
	ID string
	// User and Team are the submitter's; the job's GPUs count against
	// their caps.
	User, Team string
	// GPUs are the UUIDs of the GPUs the job holds; a memory job's one
	// shared GPU.
	GPUs []string
	// GPUMemory is a memory job's declared memory in bytes on its GPU; 0
	// for a job of whole GPUs.
	GPUMemory uint64
	// StartedAt is when the job started (or began starting).
	StartedAt time.Time
	// TimeLimit is the job's time limit; 0 means none is known.
	TimeLimit time.Duration
	// Preemptible says the job's GPUs may go to a job that waits for
	// them; Class is its priority class, which orders the choice.
	Preemptible bool
	Class       Class
	// Preempting says the job's preemption is under way (asked in an
	// earlier pass): its GPUs are coming free.
	Preempting bool
	// Array is the array job the job is a task of; "" for none.
	Array string
	// Node is the node the job runs on; "" on one host.
	Node string
	// NodeGlob, ModelGlob and Image are the job's --node and --model
	// constraints and its image: where it may run. Only Consolidate
	// reads them, to move a job only where it could have started.
	NodeGlob, ModelGlob, Image string
}

// GPU is one GPU of a node. UUIDs are unique across the fleet (NVIDIA's
// are, and the simulator's name the node).
type GPU struct {
	// UUID names the GPU; jobs are placed by UUID.
	UUID string
	// Index is NVML's index, which people see and placement orders by.
	Index int
	// MemoryTotal is the GPU's memory in bytes.
	MemoryTotal uint64
	// NVLink are the UUIDs of the GPUs this one reaches over NVLink
	// (directly or through an NVSwitch); nil when unknown. A link named by
	// either end counts for both.
	NVLink []string
	// PCIeSwitch names the PCIe switch the GPU sits under: GPUs with the
	// same non-empty name share it. "" when unknown. Topology is per
	// node: a job never spans nodes.
	PCIeSwitch string
	// Node is the node the GPU is on; "" on one host.
	Node string
	// Model is the GPU's model name, as NVML gives it (QueuedJob.Model
	// matches it).
	Model string
}

// Equal reports whether g and h are the same GPU with the same topology
// (GPU is not comparable with ==: it holds a slice).
func (g GPU) Equal(h GPU) bool {
	return g.UUID == h.UUID && g.Index == h.Index && g.MemoryTotal == h.MemoryTotal &&
		g.PCIeSwitch == h.PCIeSwitch && slices.Equal(g.NVLink, h.NVLink) &&
		g.Node == h.Node && g.Model == h.Model
}

// OutsideContainer is a running container outside the queue that holds
// GPUs (from the Docker inventory's GPU assignment).
type OutsideContainer struct {
	// Name is the container's name, as people know it.
	Name string
	// User is who the container is attributed to; "" when unknown.
	User string
	// GPUs are the UUIDs of the GPUs assigned to it.
	GPUs []string
}

// Outside is the use of GPUs outside the queue.
type Outside struct {
	// Containers are the running containers outside the queue that hold
	// GPUs.
	Containers []OutsideContainer
	// MemoryUsed is, by GPU UUID, the memory in bytes used by processes
	// outside the queue (from the live tick), summed over the processes.
	MemoryUsed map[string]uint64
}

// Config is the scheduler's part of queue.* settings.
type Config struct {
	// Placement is binpack, spread or target; "" and anything else is
	// binpack (ParsePlacement refuses unknown names when the config is
	// read).
	Placement Placement
	// MaxGPUsPerUser caps the GPUs one user's jobs hold at once; 0 means
	// DefaultMaxGPUsPerUser.
	MaxGPUsPerUser int
	// UserMaxGPUs overrides MaxGPUsPerUser for the users it names (a 0
	// there means that user's jobs do not start).
	UserMaxGPUs map[string]int
	// OutsideMemoryThreshold is the fraction of a GPU's memory that
	// processes outside the queue may use before the GPU is not free; 0
	// means DefaultOutsideMemoryThreshold.
	OutsideMemoryThreshold float64
	// MaxGPUsPerTeam caps the whole GPUs one team's jobs hold at once; 0
	// means no cap. TeamMaxGPUs overrides it for the teams it names (a 0
	// there means that team's jobs do not start). Jobs without a team are
	// not capped as a team.
	MaxGPUsPerTeam int
	TeamMaxGPUs    map[string]int
	// Weights weigh the terms of a job's priority; all 0 means
	// DefaultWeights.
	Weights Weights
	// AgeMax is the wait after which the age factor is 1; 0 means
	// DefaultAgeMax.
	AgeMax time.Duration
	// SharedGPUs are the UUIDs of the GPUs marked for sharing: they serve
	// memory jobs only.
	SharedGPUs []string
	// SharedMemoryFraction is the part of a shared GPU's memory that the
	// memory jobs on it may declare, with the memory used outside the
	// queue there; 0 means DefaultSharedMemoryFraction.
	SharedMemoryFraction float64
	// TargetUtilization is the utilisation Target places towards; 0
	// means DefaultTargetUtilization.
	TargetUtilization float64
	// PreemptAfter is how long a job that is not preemptible waits for
	// GPUs that preemptible jobs hold before they are preempted for it;
	// 0 means DefaultPreemptAfter.
	PreemptAfter time.Duration
}

// Input is everything one scheduling pass looks at.
type Input struct {
	// Queued are the jobs in state queued, in any order.
	Queued []QueuedJob
	// Running are the jobs that hold GPUs.
	Running []RunningJob
	// GPUs are the GPUs of every node, in any order.
	GPUs []GPU
	// Drained are the nodes where no job starts (gpumeter node drain):
	// the jobs running there go on, and count against caps and arrays.
	Drained map[string]bool
	// NodeImages are, by node, the image globs (path.Match) its
	// queue.images allow: a job goes only to a node that allows its
	// image. A node it does not name allows every image; nil on one
	// host, whose submit checks the image.
	NodeImages map[string][]string
	// Outside is the use of the GPUs outside the queue.
	Outside Outside
	// Config holds the settings.
	Config Config
	// FairShare is each user's fair-share factor in (0, 1] (1: used
	// nothing), computed outside from the ledger (see FairShareFactor);
	// a user missing gets 1.
	FairShare map[string]float64
	// OverBudget lists the teams over their monthly GPU-hour budget (and
	// not lifted by an admin).
	OverBudget map[string]bool
	// Util is each GPU's measured SM utilisation (0..1) over the
	// placement window, by UUID; a GPU missing has 0.
	Util map[string]float64
	// Expected is each user's expected share of a GPU (their recent
	// efficiency, 0..1) for Target; a user missing gets 1.
	Expected map[string]float64
	// Now is the time of the pass; the scheduler reads no clock.
	Now time.Time
}

// Start is a decision to start a job on GPUs, all of them or none.
type Start struct {
	// JobID is the job to start.
	JobID string
	// GPUs are the UUIDs of the GPUs to give it, in placement order; a
	// memory job's one shared GPU.
	GPUs []string
	// Node is the node the GPUs are on; "" on one host.
	Node string
	// Placement says how the GPUs were chosen.
	Placement *PlacementRecord
}

// Wait says why a queued job does not start in this pass. Its sentence
// (Text) is built only when asked for, from the figures the pass kept.
type Wait struct {
	// JobID is the waiting job.
	JobID string
	// Reason is its reason code.
	Reason Reason
	// EstimatedStart is when the job can start at the latest, with every
	// time limit an upper bound, rounded up to the minute (the time its
	// sentence says); zero when unknown, and always for a held job.
	EstimatedStart time.Time
	// Position is the job's place among the queued jobs, 1 first.
	Position int
	// Priority is the job's priority.
	Priority float64
	// figures are what Text builds the sentence from.
	figures waitFigures
}

// Plan is the outcome of a pass: the jobs to start and, for every other
// queued job, why it waits. All three lists are in queue order.
type Plan struct {
	// Order is every queued job with its priority and position.
	Order []Ranked
	// Starts are the jobs to start now.
	Starts []Start
	// Waits are the jobs that still wait, with their reasons.
	Waits []Wait
	// Preemptions are the running jobs to stop and requeue so that a
	// waiting job can start (see Preemption); nil when none.
	Preemptions []Preemption
	// PreemptAt is when the head job will have waited long enough to
	// preempt the preemptible jobs that run now: a pass is due then. Zero
	// when none is.
	PreemptAt time.Time
}

// userLimit returns the cap on the GPUs user's jobs may hold.
func (c Config) userLimit(user string) int {
	if n, ok := c.UserMaxGPUs[user]; ok {
		return n
	}
	if c.MaxGPUsPerUser > 0 {
		return c.MaxGPUsPerUser
	}
	return DefaultMaxGPUsPerUser
}

// threshold returns the outside memory threshold as a fraction.
func (c Config) threshold() float64 {
	if c.OutsideMemoryThreshold > 0 {
		return c.OutsideMemoryThreshold
	}
	return DefaultOutsideMemoryThreshold
}

// userGPUs counts the whole GPUs each user's and each team's jobs hold.
func userGPUs(running []RunningJob) (users, teams map[string]int) {
	users, teams = make(map[string]int), make(map[string]int)
	for _, r := range running {
		if r.GPUMemory == 0 {
			users[r.User] += len(r.GPUs)
			teams[r.Team] += len(r.GPUs)
		}
	}
	return users, teams
}

// teamLimit returns the cap on the GPUs team's jobs may hold, false when
// there is none.
func (c Config) teamLimit(team string) (int, bool) {
	if team == "" {
		return 0, false
	}
	if n, ok := c.TeamMaxGPUs[team]; ok {
		return n, true
	}
	return c.MaxGPUsPerTeam, c.MaxGPUsPerTeam > 0
}

// capKey is what a user_gpu_limit, team_gpu_limit or budget sentence
// says.
type capKey struct {
	team             bool
	who              string
	have, ask, limit int
	budget           bool
}

func capText(k capKey) string {
	if k.budget {
		return fmt.Sprintf("team %s is over its GPU-hour budget for this month (queue.budgets); its jobs wait for the next month or an admin to lift it", k.who)
	}
	who, key := k.who, "queue.max_gpus_per_user"
	if k.team {
		who, key = "team "+k.who, "queue.max_gpus_per_team"
	}
	switch {
	case k.ask > k.limit:
		return fmt.Sprintf("asks for %s, more than %s's limit of %d (%s)", gpusText(k.ask), who, k.limit, key)
	case k.limit <= 0:
		return fmt.Sprintf("%s's limit is 0 GPUs (%s): none of its jobs start", who, key)
	}
	return fmt.Sprintf("%s's jobs hold %d of the %d GPUs %s allows; this job asks for %d more", who, k.have, k.limit, key, k.ask)
}

// gpusText says "1 free GPU" or "n free GPUs".
func gpusText(n int) string {
	if n == 1 {
		return "1 free GPU"
	}
	return fmt.Sprintf("%d free GPUs", n)
}
