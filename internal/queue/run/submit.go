package run

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// Submission is a job request with who submits it.
type Submission struct {
	Request spec.Request
	// User and Team are the submitter, as the API authenticated them (or
	// as_user from root on the socket); never a body field.
	User, Team string
	Notify     []string // start, end
	// High says the submitter may ask for the high priority class
	// (spec.Identity.High): the API sets it for admins, the runtime for
	// queue.priority.high_users.
	High bool
	// Admin says the submitter is an admin, who may make a job wait for
	// anyone's jobs; others name their own only.
	Admin bool
	// After are the jobs the job waits for (--after), checked by Submit.
	After []queue.Dependency
	// RequeueFailed puts the job back in the queue when it exits
	// non-zero (--requeue).
	RequeueFailed bool
	// Audit is written in the job's own transaction, its Target set to
	// the job's id (an array's: the array's id).
	Audit audit.Event
	// Array, when set, makes the submission an array job of its tasks
	// (see submitArray).
	Array *queue.ArraySpec
	// Node and Model constrain where a fleet places the job: patterns
	// (path.Match) of node names and GPU model names; "" any.
	Node, Model string
}

// requestOf is what the job store keeps of req beyond the job's own
// fields: everything but the environment values, which stay in EnvDir.
func requestOf(req spec.Request, notify []string) *queue.Request {
	return &queue.Request{
		GPUMemory: req.GPUMemory, Class: queue.Class(req.Class), Mounts: req.Mounts, Workdir: req.Workdir,
		CPUs: req.CPUs, Memory: req.Memory, ShmSize: req.ShmSize, Pids: req.Pids,
		Publish: req.Publish, Labels: req.Labels, Notify: notify,
		Preemptible: req.Preemptible,
	}
}

// specRequest is job j's request as it was submitted, for spec.Build;
// its environment values are left to the caller, who reads them from
// EnvDir.
func specRequest(j queue.Job) (spec.Request, error) {
	r := j.Request
	if r == nil {
		return spec.Request{}, fmt.Errorf("job %s: the job store has no request of it that reads", j.ID)
	}
	return spec.Request{
		GPUs: j.GPUsRequested, GPUMemory: r.GPUMemory, Class: string(r.Class),
		TimeLimit: j.TimeLimit, Image: j.Image, Name: j.Name, Mounts: r.Mounts,
		Workdir: r.Workdir, CPUs: r.CPUs, Memory: r.Memory, ShmSize: r.ShmSize, Pids: r.Pids,
		Publish: r.Publish, Labels: r.Labels, Command: j.Command, Array: arrayPlace(r.Array),
		Preemptible: r.Preemptible,
	}, nil
}

// submittedText is the sentence of a job no pass has looked at yet.
const submittedText = "submitted; waiting for the scheduler's first look"

// Submit checks s against the queue's rules and adds it as a queued job;
// with s.Array, as an array job's queued tasks, and returns the first.
// A request that breaks a rule is a *spec.Refusal, one the queue cannot
// take as it is a *BadRequest. The environment values go to EnvDir, never
// to the ledger.
//
// The values are written to a temporary file first and renamed to the
// job's once the store has given it an id. A crash between the two
// leaves a job whose env file is missing: it fails at start with a reason
// that says so, and never runs without its environment.
func (q *Service) Submit(ctx context.Context, s Submission) (queue.Job, error) {
	return q.submit(ctx, s, nil)
}

// submit is Submit, with lineage set on the stored request when not
// nil: what Requeue records of the job it was made from.
func (q *Service) submit(ctx context.Context, s Submission, lineage func(*queue.Request)) (queue.Job, error) {
	rules, defaultLimit, exclusive := q.settings.forSubmit()
	if q.fleetStore != nil && s.Request.GPUMemory > 0 {
		// A memory job may go to any node's shared GPUs, not only this
		// node's.
		rules.MaxGPUMemory = q.fleetMemory(ctx, rules.MaxGPUMemory)
	}

	req := s.Request
	if s.User == "" {
		return queue.Job{}, &BadRequest{Field: "user", Text: "the submitter is unknown; a job needs a user"}
	}
	if req.TimeLimit == 0 {
		if defaultLimit <= 0 {
			return queue.Job{}, &BadRequest{Field: "time_limit",
				Text: "a job needs a time limit and queue.default_time_limit is not set; give --time-limit such as 4h"}
		}
		req.TimeLimit = defaultLimit
	}
	notify, err := notifyList(s.Notify)
	if err != nil {
		return queue.Job{}, err
	}
	if len(s.Notify) > 0 && !q.notices {
		return queue.Job{}, &BadRequest{Field: "notify",
			Text: "this agent sends no job notices: it has no webhook (policy.webhook.url); submit without --notify"}
	}
	who, err := q.identity(s.User)
	if err != nil {
		return queue.Job{}, &BadRequest{Field: "user",
			Text: fmt.Sprintf("user %s is not known to this host (host.passwd_file): %v; jobs run as their submitter's uid", s.User, err)}
	}
	who.User, who.Team, who.High = s.User, s.Team, s.High || q.highUser(s.User)
	if err := spec.Check(req, rules, who); err != nil {
		return queue.Job{}, err
	}
	if err := q.mountRefusal(req); err != nil {
		return queue.Job{}, err
	}
	if err := q.checkAfter(ctx, s.After, s.User, s.Admin); err != nil {
		return queue.Job{}, err
	}
	if err := q.placeRefusal(s); err != nil {
		return queue.Job{}, err
	}
	if q.fleet && len(req.Env) > 0 && s.Node != "" {
		if ok, _ := path.Match(s.Node, q.node); !ok {
			return queue.Job{}, &BadRequest{Field: "node", Text: fmt.Sprintf("a job with --env values runs on the node it is submitted to (%s), which keeps its values; --node %s leaves that node out: submit on that node's agent, or without --env", q.node, s.Node)}
		}
		s.Node = escapeGlob(q.node)
	}
	if exclusive >= 0 && req.GPUs > exclusive && !q.fleet {
		// Within queue.max_gpus, but more than this node has for whole
		// GPU jobs: it could never start here.
		return queue.Job{}, &spec.Refusal{Reason: spec.TooBig, Field: "gpus",
			Text: fmt.Sprintf("this node has %d GPU(s) for jobs of whole GPUs, and the job asks for %d; ask for at most %d", exclusive, req.GPUs, exclusive)}
	}

	keys := make([]string, len(req.Env))
	for i, kv := range req.Env {
		keys[i], _, _ = strings.Cut(kv, "=")
	}
	tmp, err := q.env.writeTemp(req.Env)
	if err != nil {
		return queue.Job{}, err
	}
	now := q.now().UTC()
	request := requestOf(req, notify)
	request.After, request.RequeueFailed = slices.Clone(s.After), s.RequeueFailed
	request.Node, request.Model = s.Node, s.Model
	if lineage != nil {
		lineage(request)
	}
	// A memory job asks for no whole GPU: GPUsRequested stays 0, and its
	// memory is in the request.
	node := q.node
	if q.fleet {
		// Placed by the fleet's scheduler; until then, on no node.
		node = ""
		if len(req.Env) > 0 && request.Node == "" {
			// The values stay in this node's env store, which no other
			// node reads: the job runs here.
			request.Node = escapeGlob(q.node)
		}
	}
	job := queue.Job{
		Node: node, Name: req.Name, User: s.User, Team: s.Team,
		State: queue.Queued, Reason: queue.ReasonResources, ReasonText: submittedText,
		GPUsRequested: req.GPUs, Image: req.Image, Command: slices.Clone(req.Command), EnvKeys: keys,
		Request: request, TimeLimit: req.TimeLimit, SubmittedAt: now,
	}
	ev := q.fill(s.Audit, "jobs.submit", "")
	if s.Array != nil {
		return q.submitArray(ctx, job, *s.Array, ev, tmp)
	}
	stored, err := q.store.SubmitJob(ctx, job, ev)
	if err != nil {
		if tmp != "" {
			_ = os.Remove(tmp)
		}
		return queue.Job{}, err
	}
	if tmp != "" {
		if err := os.Rename(tmp, q.env.path(stored.ID)); err != nil {
			// The job stays; it fails at start, saying its env is missing.
			q.log.Error("keep the job's environment", "job", stored.ID, "err", err)
			_ = os.Remove(tmp)
		}
	}
	if ev.Target == "" {
		ev.Target = stored.ID // a requeue's is the job it was made from
	}
	q.auditedLater(ctx, ev)
	q.launch.submitted()
	return stored, nil
}

// highUser says whether user may ask for the high class by the queue's
// own list (admins may whatever it says).
func (q *Service) highUser(user string) bool { return slices.Contains(q.highUsers, user) }

func notifyList(in []string) ([]string, error) {
	var out []string
	for _, n := range in {
		if _, err := config.ParseNotifyEvent(n); err != nil {
			return nil, &BadRequest{Field: "notify", Text: err.Error() + "; give --notify start,end"}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// placeRefusal checks the submission's placement constraints: patterns,
// and only in a fleet.
func (q *Service) placeRefusal(s Submission) error {
	for _, c := range []struct{ field, flag, v string }{{"node", "--node", s.Node}, {"model", "--model", s.Model}} {
		if c.v == "" {
			continue
		}
		if !q.fleet {
			return &BadRequest{Field: c.field, Text: "this node is not in a fleet (queue.fleet), so there is no choice of " + c.field + "; submit without " + c.flag}
		}
		if err := queue.ValidNodeGlob(c.v); err != nil {
			return &BadRequest{Field: c.field, Text: err.Error()}
		}
	}
	return nil
}

// escapeGlob is name as a pattern that matches name alone.
func escapeGlob(name string) string {
	var b strings.Builder
	for _, r := range name {
		if strings.ContainsRune(`*?[]\\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
