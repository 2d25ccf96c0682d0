package policy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	gpuqueue "github.com/gpumeter/gpumeter/internal/queue"
)

// EventJob is the audit kind of a job notification.
const EventJob = "job_notify"

// JobNotice is a GPU queue job that started or ended, as a webhook hears
// of it: the webhook's own wire shape (its JSON is a contract receivers
// read), made from the gpuqueue.Job once, by Notify.
type JobNotice struct {
	Event    string   `json:"event"` // start or end
	ID       string   `json:"id"`
	Name     string   `json:"name,omitempty"`
	User     string   `json:"user"`
	Team     string   `json:"team,omitempty"`
	State    string   `json:"state"`
	Reason   string   `json:"reason,omitempty"`
	GPUs     []string `json:"gpus"`
	ExitCode *int     `json:"exit_code"`
	Node     string   `json:"node,omitempty"`
}

// JobMessage is the JSON body of a job notification. Text makes it a
// Slack-compatible incoming-webhook message too.
type JobMessage struct {
	Text string    `json:"text"`
	Kind string    `json:"kind"` // job_start or job_end
	Job  JobNotice `json:"job"`
}

// JobNotifierConfig configures a JobNotifier.
type JobNotifierConfig struct {
	Webhook config.Webhook
	Client  *http.Client // nil: a client of its own
	Audit   Auditor      // nil: not audited
	Logger  *slog.Logger
	// Queue bounds the notices waiting to be sent; past it the newest
	// is dropped, logged and audited as dropped. 0 means 256.
	Queue int
}

// JobNotifier sends the queue's job notices to the policy's webhook, one
// at a time on its own goroutine (Run), so that the queue never waits on
// a webhook.
type JobNotifier struct {
	cfg JobNotifierConfig
	ch  chan JobNotice
}

// NewJobNotifier returns a notifier; Run sends what Notify is given.
func NewJobNotifier(cfg JobNotifierConfig) *JobNotifier {
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 256
	}
	return &JobNotifier{cfg: cfg, ch: make(chan JobNotice, cfg.Queue)}
}

// Notify hands the notice of event (start, end or warn) for job to Run
// without waiting. A notice that finds the queue full is dropped, and the
// drop is logged and audited.
func (j *JobNotifier) Notify(event string, job gpuqueue.Job) {
	n := JobNotice{
		Event: event, ID: job.ID, Name: job.Name, User: job.User, Team: job.Team, State: string(job.State),
		Reason: string(job.Reason), GPUs: job.GPUs, ExitCode: job.ExitCode, Node: job.Node,
	}
	select {
	case j.ch <- n:
	default:
		j.cfg.Logger.Warn("job notification dropped: too many waiting", "job", n.ID, "event", n.Event)
		j.audit(context.Background(), n, "dropped", 0, fmt.Errorf("more than %d notifications waiting", j.cfg.Queue))
	}
}

// Run sends notices until ctx ends.
func (j *JobNotifier) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-j.ch:
			j.send(ctx, n)
		}
	}
}

func (j *JobNotifier) send(ctx context.Context, n JobNotice) {
	w := j.cfg.Webhook
	if w.URL == "" {
		return
	}
	if w.Timeout <= 0 {
		w.Timeout = 10 * time.Second
	}
	m := JobMessage{Text: jobText(n), Kind: "job_" + n.Event, Job: n}
	if m.Job.GPUs == nil {
		m.Job.GPUs = []string{}
	}
	attempts, err := post(ctx, j.cfg.Client, w, time.Second, m)
	outcome := OutcomeSent
	if err != nil {
		outcome = OutcomeFailed
		j.cfg.Logger.Warn("job notification", "job", n.ID, "event", n.Event, "err", err)
	}
	j.audit(ctx, n, outcome, attempts, err)
}

func (j *JobNotifier) audit(ctx context.Context, n JobNotice, outcome string, attempts int, err error) {
	if j.cfg.Audit == nil {
		return
	}
	e := audit.Event{Time: time.Now(), Kind: EventJob, Owner: n.User, Action: "jobs.notify", Target: n.ID, Outcome: outcome, Attempts: attempts, Caller: "queue"}
	if err != nil {
		e.Error = err.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultAuditTimeout)
	defer cancel()
	_ = j.cfg.Audit.Act(ctx, e)
}

// jobText is the notice in a sentence.
func jobText(n JobNotice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gpumeter: job %s", n.ID)
	if n.Name != "" {
		fmt.Fprintf(&b, " (%s)", n.Name)
	}
	fmt.Fprintf(&b, " of %s", n.User)
	if n.Node != "" {
		fmt.Fprintf(&b, " on %s", n.Node)
	}
	switch config.NotifyEvent(n.Event) {
	case config.NotifyStart:
		fmt.Fprintf(&b, " started on %d GPU(s)", len(n.GPUs))
	default:
		fmt.Fprintf(&b, " ended: %s", n.State)
		if n.ExitCode != nil {
			fmt.Fprintf(&b, ", exit code %d", *n.ExitCode)
		}
		if n.Reason != "" && n.Reason != "exit_code" {
			fmt.Fprintf(&b, " (%s)", n.Reason)
		}
	}
	return b.String()
}
