package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

var _ ledger.AuditStore = (*Store)(nil)

// Audit adds audit events in one transaction.
func (s *Store) Audit(ctx context.Context, events []ledger.AuditEvent) error {
	if err := ctx.Err(); err != nil || len(events) == 0 {
		return err
	}
	var pb pgx.Batch
	for _, e := range events {
		args, err := sqlledger.AuditArgs(e)
		if err != nil {
			return err
		}
		pb.Queue(sqlledger.InsertAudit, args...)
	}
	err := s.retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return tx.SendBatch(ctx, &pb).Close()
		})
	})
	if err != nil {
		return fmt.Errorf("audit to ledger postgres %s: %w", s.where, err)
	}
	return nil
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
		return nil, fmt.Errorf("read audit events from ledger postgres %s: %w", s.where, err)
	}
	return out, nil
}
