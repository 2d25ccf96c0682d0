package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

var (
	_ ledger.LeaseTaker       = (*Store)(nil)
	_ ledger.JobStore         = (*Store)(nil)
	_ ledger.BudgetStore      = (*Store)(nil)
	_ ledger.OwnerUsageReader = (*Store)(nil)
	_ ledger.Fleet            = (*Store)(nil)
)

// writerLock is the lock file beside the ledger: the process that holds
// an exclusive flock on it is the ledger's one writer. The kernel lets go
// of the lock when that process ends, however it ends, so a lock that can
// be taken proves that the last writer is gone and its lease may be taken
// over at once. The file holds who took it, for the message that others
// get. Readers (report, waste, doctor) do not take it.
type writerLock struct {
	f *os.File
}

// lockInfo is what the lock file says of its holder.
type lockInfo struct {
	Node    string    `json:"node"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

func (s *Store) lockPath() string { return s.path + ".lock" }

// takeWriterLock takes the file's writer lock for l, or says who holds it.
func (s *Store) takeWriterLock(l ledger.Lease) error {
	if s.wlock != nil {
		return nil
	}
	f, err := os.OpenFile(s.lockPath(), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("writer lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("writer lock %s: %w", s.lockPath(), err)
		}
		var held lockInfo
		b, _ := os.ReadFile(s.lockPath())
		if json.Unmarshal(b, &held) != nil || held.PID == 0 {
			return &ledger.LeaseHeldError{Locked: true, File: s.path}
		}
		return &ledger.LeaseHeldError{Locked: true, File: s.path,
			Holder: ledger.Lease{Node: held.Node, Host: held.Host, PID: held.PID, Started: held.Started},
			Silent: s.silence(held.Node)}
	}
	b, err := json.Marshal(lockInfo{Node: l.Node, Host: l.Host, PID: l.PID, Started: time.Now().UTC()})
	if err == nil {
		if err = f.Truncate(0); err == nil {
			_, err = f.WriteAt(append(b, '\n'), 0)
		}
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("writer lock %s: %w", s.lockPath(), err)
	}
	s.wlock = &writerLock{f: f}
	return nil
}

// silence is how long node's lease has been silent, or 0 when unknown.
func (s *Store) silence(node string) time.Duration {
	var hb int64
	err := s.rdb.QueryRow("SELECT heartbeat_us FROM node_leases WHERE node = $1", node).Scan(&hb)
	if err != nil {
		return 0
	}
	return max(0, time.Since(time.UnixMicro(hb)))
}

func (s *Store) releaseWriterLock() error {
	if s.wlock == nil {
		return nil
	}
	err := s.wlock.f.Close() // closing the file lets go of the flock
	s.wlock = nil
	return err
}

// Acquire takes the file's writer lock and then node's lease. Holding the
// lock means that any earlier holder of the lease is dead, so its lease is
// taken over however recently it wrote; takeover only matters to the
// PostgreSQL ledger, which many hosts share.
func (s *Store) Acquire(ctx context.Context, want ledger.Lease, takeover time.Duration) (ledger.Lease, error) {
	l, err := s.acquire(ctx, want)
	var held *ledger.LeaseHeldError
	if errors.As(err, &held) {
		return ledger.Lease{}, err // it names the ledger and the holder
	}
	if err != nil {
		return ledger.Lease{}, fmt.Errorf("lease of node %q in %s: %w", want.Node, s.path, err)
	}
	return l, nil
}

func (s *Store) acquire(ctx context.Context, want ledger.Lease) (ledger.Lease, error) {
	if want.Node == "" || want.Instance == "" {
		return ledger.Lease{}, errors.New("a lease needs a node and an instance")
	}
	if err := s.lock(ctx); err != nil {
		return ledger.Lease{}, err
	}
	defer func() { <-s.wsem }()
	if err := s.takeWriterLock(want); err != nil {
		return ledger.Lease{}, err
	}
	now := time.Now()
	l := want
	l.Started, l.Heartbeat, l.Seq = now.Truncate(time.Microsecond), now.Truncate(time.Microsecond), 0
	_, err := s.wdb.ExecContext(ctx, `INSERT INTO node_leases (node, instance, host, pid, started_us, heartbeat_us, seq, released)
		VALUES ($1, $2, $3, $4, $5, $5, 0, FALSE)
		ON CONFLICT (node) DO UPDATE SET instance = excluded.instance, host = excluded.host, pid = excluded.pid,
			started_us = excluded.started_us, heartbeat_us = excluded.heartbeat_us, seq = 0, released = FALSE`,
		l.Node, l.Instance, l.Host, l.PID, now.UnixMicro())
	if err != nil {
		s.releaseWriterLock()
		return ledger.Lease{}, err
	}
	return l, nil
}

// Release marks the lease released and lets go of the writer lock.
func (s *Store) Release(ctx context.Context, l ledger.Lease) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer func() { <-s.wsem }()
	_, err := s.wdb.ExecContext(ctx, `UPDATE node_leases SET released = TRUE, heartbeat_us = $3
		WHERE node = $1 AND instance = $2`, l.Node, l.Instance, time.Now().UnixMicro())
	if err != nil {
		return fmt.Errorf("release the lease of node %q in %s: %w", l.Node, s.path, err)
	}
	return s.releaseWriterLock()
}

// fence checks, inside a batch's transaction, that id's instance holds
// the lease. written says the batch was committed before.
func fence(ctx context.Context, tx *sql.Tx, id ledger.BatchID) (written bool, err error) {
	var h ledger.Lease
	var seq, started, hb int64
	var released bool
	err = tx.QueryRowContext(ctx, `SELECT instance, host, pid, started_us, heartbeat_us, seq, released
		FROM node_leases WHERE node = $1`, id.Node).Scan(&h.Instance, &h.Host, &h.PID, &started, &hb, &seq, &released)
	if errors.Is(err, sql.ErrNoRows) {
		return false, &ledger.FencedError{ID: id}
	}
	if err != nil {
		return false, err
	}
	h.Node, h.Started, h.Heartbeat, h.Seq = id.Node, time.UnixMicro(started), time.UnixMicro(hb), uint64(seq)
	if h.Instance != id.Instance || released {
		if released {
			h = ledger.Lease{}
		}
		return false, &ledger.FencedError{ID: id, Holder: h}
	}
	return id.Seq <= h.Seq, nil
}

// renew records id as the lease's last batch.
func renew(ctx context.Context, tx *sql.Tx, id ledger.BatchID) error {
	_, err := tx.ExecContext(ctx, `UPDATE node_leases SET seq = $3, heartbeat_us = $4 WHERE node = $1 AND instance = $2`,
		id.Node, id.Instance, int64(id.Seq), time.Now().UnixMicro())
	return err
}
