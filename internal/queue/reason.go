package queue

// Reason is a code saying why a job waits or why it ended. Every queued
// job has one, and so does every ended job; the codes are one fixed list
// (see Reasons), like Slurm's job reason codes.
type Reason string

// Reasons a queued job waits.
const (
	// ReasonResources: not enough free GPUs for the job, or the job waits
	// behind an earlier job that is itself waiting for GPUs.
	ReasonResources Reason = "resources"
	// ReasonOutsideUse: the job would start but for GPUs taken by use
	// outside the queue: a container started by hand with GPUs, or
	// processes holding more than the threshold of a GPU's memory.
	ReasonOutsideUse Reason = "outside_use"
	// ReasonUserGPULimit: starting the job would take its user past
	// queue.max_gpus_per_user.
	ReasonUserGPULimit Reason = "user_gpu_limit"
	// ReasonTeamGPULimit: starting the job would take its team past
	// queue.max_gpus_per_team.
	ReasonTeamGPULimit Reason = "team_gpu_limit"
	// ReasonBudget: the job's team is over its GPU-hour budget for the
	// month (queue.budgets) and no admin has lifted it.
	ReasonBudget Reason = "budget"
	// ReasonHeld: the job is held by its owner or an admin; it keeps its
	// place in the queue and starts only once released.
	ReasonHeld Reason = "held"
	// ReasonStartFailed: the last try to start the job failed (a Docker
	// error, kept in the reason's sentence); the job is back in the queue
	// and will be tried again.
	ReasonStartFailed Reason = "start_failed"
	// ReasonTooBig: the job asks for more GPUs than the host has (on a
	// fleet: than any one node it may run on has); it cannot start here
	// and does not hold up the jobs behind it.
	ReasonTooBig Reason = "too_big"
	// ReasonInvalidRequest: the job asks for no GPUs, which submit
	// refuses; a queued job with it points at a damaged store.
	ReasonInvalidRequest Reason = "invalid_request"
	// ReasonLostRequeued: the job's container vanished with no exit code
	// and the job went back to the queue (at most queue.max_requeue times).
	ReasonLostRequeued Reason = "lost_requeued"
	// ReasonEngineUnavailable: the job would start, or its start failed,
	// because the Docker engine could not be reached (a connection
	// error, a 503); no start attempt is counted, and the queue starts
	// nothing until the engine answers again.
	ReasonEngineUnavailable Reason = "engine_unavailable"
	// ReasonEngineFailure: the job's container was killed when the Docker
	// engine stopped (its exit was seen only once the engine was back, or
	// while it went away, with a signal's exit code and no stop of the
	// queue's); the job went back to the queue, which counts no requeue.
	ReasonEngineFailure Reason = "engine_failure"
	// ReasonDependency: the job waits for jobs it depends on (--after)
	// to end as it asked.
	ReasonDependency Reason = "dependency"
	// ReasonPreempted: the job was preemptible and gave its GPUs to a job
	// that had waited for them; it is back in the queue, keeping its age.
	ReasonPreempted Reason = "preempted"
	// ReasonFailedRequeued: the job exited non-zero and, submitted with
	// --requeue, went back to the queue (at most queue.max_requeue times).
	ReasonFailedRequeued Reason = "failed_requeued"
	// ReasonArrayLimit: the job is a task of an array job that already
	// runs as many tasks as its cap allows (--array 0-99%8); it does not
	// hold up the jobs behind it.
	ReasonArrayLimit Reason = "array_limit"
	// ReasonNodeConstraint: no node the job may run on is open to it:
	// its --node or --model constraint matches no node of the fleet, or
	// every node it matches is drained. It does not hold up the jobs
	// behind it.
	ReasonNodeConstraint Reason = "node_constraint"
)

// Reasons a job ended.
const (
	// ReasonExitCode: the container exited on its own; the exit code says
	// how (0 succeeded, anything else failed).
	ReasonExitCode Reason = "exit_code"
	// ReasonTimeLimit: the job reached its time limit and was stopped
	// (state timeout; the exit code of the stop is kept).
	ReasonTimeLimit Reason = "time_limit"
	// ReasonCancelled: its owner or an admin cancelled the job.
	ReasonCancelled Reason = "cancelled"
	// ReasonStoppedByPolicy: the waste policy stopped the job (state
	// failed).
	ReasonStoppedByPolicy Reason = "stopped_by_policy"
	// ReasonStartAttempts: the job failed to start queue.max_start_attempts
	// times and was given up (state failed).
	ReasonStartAttempts Reason = "start_attempts"
	// ReasonRequeueLimit: the job was lost more than queue.max_requeue
	// times and was given up, or was lost or killed with the engine where
	// queue.requeue_on leaves that cause out (state failed).
	ReasonRequeueLimit Reason = "requeue_limit"
	// ReasonStartRefused: the job cannot start as it is, and trying again
	// cannot help: its environment values are missing, its request no
	// longer passes the rules, or Docker mounted other paths than asked
	// (state failed; the sentence says which).
	ReasonStartRefused Reason = "start_refused"
	// ReasonMemoryOverrun: the job's measured GPU memory stayed over its
	// declared memory past queue.memory_overrun_grace and the meter
	// stopped it (state failed).
	ReasonMemoryOverrun Reason = "memory_overrun"
	// ReasonDependencyNeverSatisfied: a job the job depends on ended in a
	// way that can no longer meet its condition (state failed; the
	// sentence names the job).
	ReasonDependencyNeverSatisfied Reason = "dependency_never_satisfied"
)

// ReasonInfo describes one reason code.
type ReasonInfo struct {
	// Code is the reason code as stored and shown.
	Code Reason
	// Waiting is true for the reasons of a queued job, false for the
	// reasons a job ended.
	Waiting bool
	// Meaning says in a sentence what the code means.
	Meaning string
}

// reasons is the one list of reason codes and their meanings.
var reasons = []ReasonInfo{
	{ReasonResources, true, "not enough free GPUs for the job, or it waits behind an earlier job that waits for GPUs"},
	{ReasonOutsideUse, true, "GPUs the job would take are used outside the queue (a container started by hand, or processes over the memory threshold)"},
	{ReasonUserGPULimit, true, "starting the job would take its user past queue.max_gpus_per_user"},
	{ReasonTeamGPULimit, true, "starting the job would take its team past queue.max_gpus_per_team"},
	{ReasonBudget, true, "the job's team is over its GPU-hour budget for the month (queue.budgets)"},
	{ReasonHeld, true, "held by its owner or an admin; it keeps its place and starts once released"},
	{ReasonStartFailed, true, "the last try to start the job failed; it is back in the queue and will be tried again"},
	{ReasonTooBig, true, "the job asks for more GPUs than the host (or any one node it may run on) has, or more memory than a shared GPU allows; it does not hold up the jobs behind it"},
	{ReasonInvalidRequest, true, "the job asks for no GPUs, or for GPUs and GPU memory both, which submit refuses"},
	{ReasonLostRequeued, true, "the job's container vanished with no exit code and the job went back to the queue"},
	{ReasonEngineUnavailable, true, "the Docker engine does not answer; the job starts once it does, and no start attempt is counted"},
	{ReasonEngineFailure, true, "the job's container was killed when the Docker engine stopped; the job is back in the queue, with no requeue counted"},
	{ReasonDependency, true, "the job waits for the jobs it depends on (--after) to end as it asked"},
	{ReasonPreempted, true, "the job was preemptible and gave its GPUs to a job that had waited for them; it is back in the queue, keeping its place by age"},
	{ReasonFailedRequeued, true, "the job exited non-zero and, submitted with --requeue, went back to the queue"},
	{ReasonArrayLimit, true, "the job is a task of an array job that runs as many tasks as its limit (--array ...%N) allows; it does not hold up the jobs behind it"},
	{ReasonNodeConstraint, true, "no node the job may run on is open: its --node or --model constraint matches no node, or every node it matches is drained; it does not hold up the jobs behind it"},
	{ReasonExitCode, false, "the container exited on its own; the exit code says how"},
	{ReasonTimeLimit, false, "the job reached its time limit and was stopped"},
	{ReasonCancelled, false, "its owner or an admin cancelled the job"},
	{ReasonStoppedByPolicy, false, "the waste policy stopped the job"},
	{ReasonStartAttempts, false, "the job failed to start queue.max_start_attempts times"},
	{ReasonRequeueLimit, false, "the job was lost more than queue.max_requeue times, or lost or killed with the engine where queue.requeue_on leaves that cause out"},
	{ReasonStartRefused, false, "the job cannot start as it is (environment values missing, request no longer allowed, mounts not as asked)"},
	{ReasonMemoryOverrun, false, "the job's measured GPU memory exceeded its declared memory past the grace and it was stopped"},
	{ReasonDependencyNeverSatisfied, false, "a job this one depends on ended in a way that can no longer meet its condition"},
}

// Reasons returns every reason code with its meaning, waiting reasons
// first.
func Reasons() []ReasonInfo { return append([]ReasonInfo(nil), reasons...) }

// Valid reports whether r is one of the reason codes.
func (r Reason) Valid() bool {
	_, ok := r.info()
	return ok
}

// Meaning returns the sentence that explains r, or "" for an unknown code.
func (r Reason) Meaning() string {
	info, _ := r.info()
	return info.Meaning
}

func (r Reason) info() (ReasonInfo, bool) {
	for _, info := range reasons {
		if info.Code == r {
			return info, true
		}
	}
	return ReasonInfo{}, false
}
