package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
)

// defaultAuditLimit is the most events audit --file prints unless --limit
// says otherwise; the agent has its own.
const defaultAuditLimit = 10_000

func newAudit() *cobra.Command {
	var (
		cf                          clientFlags
		lf                          ledgerFlags
		since, from, to, file, form string
		limit                       int
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log: API calls that changed something or were refused, and what the waste policy did",
		Long: `Show the agent's audit log over a window, oldest first: API calls that
changed something or were turned away, with who called, from where and with
what status, and what the waste policy did to containers. Reads it where
report reads: from an agent (admins only) or from the ledger's audit events
(--db, --dsn, --config, or the config's ledger when no agent runs here); or
with --file from an audit.jsonl on this host. One line on stderr says which
agent or ledger was read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if form != "table" && form != "json" {
				return fmt.Errorf("--format: %q is not table or json", form)
			}
			flags := cmd.Flags()
			if file != "" && (flags.Changed("url") || flags.Changed("ca-file")) {
				return errors.New("--file reads the log on this host; --url and --ca-file ask an agent: give one or the other")
			}
			if file != "" && (lf.db != "" || lf.dsn != "" || flags.Changed("config")) {
				return errors.New("--file reads that audit.jsonl; --db, --dsn and --config read the ledger's audit events: give one or the other")
			}
			q := url.Values{}
			for k, v := range map[string]string{"since": since, "from": from, "to": to} {
				if v != "" {
					q.Set(k, v)
				}
			}
			// The window is checked here as the agent checks it, so that
			// a bad flag is named as a flag, whoever is asked.
			w, err := apitype.ParseAuditQueryNamed(q, time.Now(), defaultAuditLimit, func(p string) string { return "--" + p })
			if err != nil {
				return err
			}
			if flags.Changed("limit") && limit < 1 {
				return fmt.Errorf("--limit: %d is not 1 or more", limit)
			}
			var resp apitype.AuditResponse
			if file != "" {
				if !flags.Changed("limit") {
					limit = defaultAuditLimit
				}
				events, err := audit.ReadFile(file, w.From, w.To)
				if err != nil {
					return err
				}
				if len(events) > limit {
					events, resp.Truncated = events[len(events)-limit:], true
				}
				resp.From, resp.To, resp.Events = w.From.UTC(), w.To.UTC(), server.AuditFromLog(events)
			} else if agent, err := chooseSource(cmd, &lf, &cf, hostEnv(), nil); err != nil {
				return err
			} else if agent == nil {
				if resp, err = auditFromLedger(cmd, &lf, w, limit); err != nil {
					return err
				}
			} else {
				if flags.Changed("limit") {
					q.Set("limit", strconv.Itoa(limit))
				}
				if resp, err = agent.Audit(cmd.Context(), q); err != nil {
					return agent.explain(err)
				}
				agent.announce(cmd)
			}
			if resp.Events == nil {
				resp.Events = []apitype.AuditEvent{}
			}
			if resp.Truncated {
				fmt.Fprintf(cmd.ErrOrStderr(), "more events fell in the window than the %d shown, the newest: narrow the window or raise --limit\n", len(resp.Events))
			}
			if form == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(resp)
			}
			return writeAudit(cmd.OutOrStdout(), resp.Events)
		},
	}
	cf.register(cmd)
	lf.registerLedger(cmd, "its audit events")
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "window length ending at --to, e.g. 1h or 7d (default 24h)")
	f.StringVar(&from, "from", "", "window start: RFC 3339 or a date (2026-11-02)")
	f.StringVar(&to, "to", "", "window end (exclusive): RFC 3339 or a date; default now")
	f.IntVar(&limit, "limit", 0, "at most this many events, the newest (default: the agent's api limit, or 10000 from a file or a ledger)")
	f.StringVar(&form, "format", "table", "output: table or json")
	completeValues(cmd, "format", "table", "json")
	f.StringVar(&file, "file", "", "read this audit.jsonl instead of asking the agent")
	return cmd
}

// auditFromLedger reads the audit events in w from the ledger that lf
// or the config names, the newest limit of them (defaultAuditLimit when
// limit is 0).
func auditFromLedger(cmd *cobra.Command, lf *ledgerFlags, w apitype.AuditQuery, limit int) (apitype.AuditResponse, error) {
	resp := apitype.AuditResponse{From: w.From.UTC(), To: w.To.UTC()}
	cfg, err := loadConfig(cmd, lf.configPath)
	if err != nil {
		return resp, err
	}
	store, err := lf.open(cmd, &cfg)
	if err != nil {
		return resp, err
	}
	defer store.Close()
	got, err := store.AuditEvents(cmd.Context(), audit.Filter{From: w.From, To: w.To})
	if err != nil {
		return resp, fmt.Errorf("read the audit events: %w", err)
	}
	if limit == 0 {
		limit = defaultAuditLimit
	}
	if len(got) > limit {
		got, resp.Truncated = got[len(got)-limit:], true
	}
	// AuditFromLog gives an empty list, not null, when there are none.
	resp.Events = server.AuditFromLog(got)
	return resp, nil
}

// writeAudit prints one line per event. API calls fill the caller's
// columns; the policy's events put the rule in DETAIL and the container
// in TARGET.
func writeAudit(w io.Writer, events []apitype.AuditEvent) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tCALLER\tROLE\tSOURCE\tACTION\tTARGET\tSTATUS/OUTCOME\tDETAIL")
	for i := range events {
		e := &events[i]
		caller, action, target := e.Caller, e.Action, e.Target
		var detail []string
		if e.Kind != apitype.AuditKindAPI {
			if caller == "" {
				caller = "policy"
			}
			if action == "" {
				action = e.Kind
			}
			if target == "" {
				target = e.Container
				if target == "" {
					target = container.ShortID(e.ContainerID)
				}
				if e.Owner != "" {
					target += " of " + e.Owner
				}
			}
			if e.Rule != "" {
				detail = append(detail, "rule "+e.Rule)
			}
		}
		status := e.Outcome
		if e.Status != 0 {
			status = strconv.Itoa(e.Status) + " " + e.Outcome
		}
		if e.DryRun {
			status += " (dry run)"
		}
		if e.Error != "" {
			detail = append(detail, e.Error)
		}
		fmt.Fprintln(tw, strings.Join([]string{
			e.Time.UTC().Format("2006-01-02 15:04:05"), cell(e.Kind), cell(caller), cell(e.Role), cell(e.Source),
			cell(action), cell(target), cell(strings.TrimSpace(status)), cell(strings.Join(detail, "; ")),
		}, "\t"))
	}
	return tw.Flush()
}

// cell is s for a table cell: "-" when empty, and cleaned, so that a tab
// in a target cannot shift the columns.
func cell(s string) string { return dash(strings.TrimSpace(client.Clean(s))) }
