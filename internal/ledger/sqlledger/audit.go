package sqlledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// InsertAudit is the statement that adds one audit event; AuditArgs gives
// its arguments.
const InsertAudit = `INSERT INTO audit_events (at_us, node, kind, rule, finding_id, container_id, container, owner, evidence, dry_run, outcome, attempts, error,
	caller, role, source, action, target, status, count)
VALUES ` + auditValues

// auditValues is InsertAudit's one row of placeholders.
const auditValues = `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`

// AuditArgs are the arguments of InsertAudit for e.
func AuditArgs(e audit.Event) ([]any, error) {
	ev := "{}"
	if len(e.Evidence) > 0 {
		b, err := json.Marshal(e.Evidence)
		if err != nil {
			return nil, fmt.Errorf("audit evidence: %w", err)
		}
		ev = string(b)
	}
	return []any{e.Time.UnixMicro(), e.Node, e.Kind, e.Rule, e.FindingID, e.ContainerID, e.Container, e.Owner,
		ev, e.DryRun, e.Outcome, int64(e.Attempts), e.Error,
		e.Caller, e.Role, e.Source, e.Action, e.Target, int64(e.Status), e.Count}, nil
}

// AuditEvents reads the audit events in f's window, oldest first.
func AuditEvents(ctx context.Context, q Querier, f audit.Filter) ([]audit.Event, error) {
	return auditEvents(ctx, q, f, 0)
}

// AuditNewest reads the newest n (n > 0) audit events in f's window,
// oldest first, and says whether the window holds more.
func AuditNewest(ctx context.Context, q Querier, f audit.Filter, n int) ([]audit.Event, bool, error) {
	if n <= 0 {
		return nil, false, fmt.Errorf("audit events: the newest %d is not a number of events", n)
	}
	// One more than asked says whether there are more; the index on
	// at_us serves the newest first without reading the whole window.
	out, err := auditEvents(ctx, q, f, n+1)
	if err != nil {
		return nil, false, err
	}
	more := len(out) > n
	if more {
		out = out[:n]
	}
	slices.Reverse(out)
	return out, more, nil
}

// auditEvents reads f's window oldest first, or with newest > 0 the
// newest that many, newest first.
func auditEvents(ctx context.Context, q Querier, f audit.Filter, newest int) ([]audit.Event, error) {
	var qb query
	var where []string
	if !f.From.IsZero() {
		where = append(where, "at_us >= "+qb.arg(f.From.UnixMicro()))
	}
	if !f.To.IsZero() {
		where = append(where, "at_us < "+qb.arg(f.To.UnixMicro()))
	}
	if f.Node != "" {
		where = append(where, "node = "+qb.arg(f.Node))
	}
	sql := "SELECT at_us, node, kind, rule, finding_id, container_id, container, owner, evidence, dry_run, outcome, attempts, error, " +
		"caller, role, source, action, target, status, count FROM audit_events"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	if newest > 0 {
		sql += " ORDER BY at_us DESC, id DESC LIMIT " + qb.arg(int64(newest))
	} else {
		sql += " ORDER BY at_us, id"
	}
	rows, err := q.Query(ctx, sql, qb.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []audit.Event
	for rows.Next() {
		var (
			e             audit.Event
			at, n, status int64
			evidence      string
		)
		if err := rows.Scan(&at, &e.Node, &e.Kind, &e.Rule, &e.FindingID, &e.ContainerID, &e.Container, &e.Owner,
			&evidence, &e.DryRun, &e.Outcome, &n, &e.Error,
			&e.Caller, &e.Role, &e.Source, &e.Action, &e.Target, &status, &e.Count); err != nil {
			return nil, err
		}
		e.Time, e.Attempts, e.Status = time.UnixMicro(at).UTC(), int(n), int(status)
		if evidence != "{}" && evidence != "" {
			if err := json.Unmarshal([]byte(evidence), &e.Evidence); err != nil {
				return nil, fmt.Errorf("audit evidence: %w", err)
			}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
