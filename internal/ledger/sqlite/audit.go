package sqlite

import (
	"context"
	"fmt"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

var _ ledger.AuditStore = (*Store)(nil)

// Audit adds audit events in one transaction.
func (s *Store) Audit(ctx context.Context, events []ledger.AuditEvent) error {
	if err := s.audit(ctx, events); err != nil {
		return fmt.Errorf("audit to ledger %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) audit(ctx context.Context, events []ledger.AuditEvent) error {
	if err := ctx.Err(); err != nil || len(events) == 0 {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer func() { <-s.wsem }()
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, e := range events {
		args, err := sqlledger.AuditArgs(e)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlledger.InsertAudit, args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// AuditEvents reads audit events.
func (s *Store) AuditEvents(ctx context.Context, f ledger.Filter) ([]ledger.AuditEvent, error) {
	var out []ledger.AuditEvent
	err := s.read(ctx, func(q sqlledger.Querier) error {
		var err error
		out, err = sqlledger.AuditEvents(ctx, q, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit events from ledger %s: %w", s.path, err)
	}
	return out, nil
}
