package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t testing.TB, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return open(t, pgtest.DSN(t)) })
}

// rawExec runs statements on dsn with no gpumeter code in between.
func rawExec(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func rawCount(t testing.TB, dsn, table string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOpenClosedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// A refused connection is answered at once: Open must give up on it
	// by itself rather than retry until its caller's deadline, which is
	// here only a guard against retrying forever.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, "postgres://gpumeter:secret-pw@"+addr+"/ledger?sslmode=disable")
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded", addr)
	}
	if ctx.Err() != nil {
		t.Errorf("Open retried a refused connection until its caller's deadline: %v", err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("Open = %v, want it to name %s", err, addr)
	}
	if strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("Open = %v, shows the password", err)
	}
}

func TestOpenBadDSN(t *testing.T) {
	_, err := postgres.Open(context.Background(), "postgres://u:secret-pw@host:notaport/db")
	if err == nil || strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("Open(bad DSN) = %v, want an error without the password", err)
	}
}

func TestNotLedger(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup []string
		says  string
	}{
		{"ForeignTables", []string{"CREATE TABLE invoices (id serial PRIMARY KEY, total numeric)"}, "invoices"},
		{"WrongMagic", []string{"CREATE TABLE gpumeter_meta (key text PRIMARY KEY, value text NOT NULL)",
			"INSERT INTO gpumeter_meta VALUES ('magic', 'something else'), ('schema_version', '1')"}, "something else"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			rawExec(t, dsn, tc.setup...)
			s, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded, want ledger.ErrNotLedger")
			}
			if !errors.Is(err, ledger.ErrNotLedger) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Open = %v, want ledger.ErrNotLedger saying %q", err, tc.says)
			}
			if n := rawCount(t, dsn, "information_schema.tables WHERE table_schema = 'public'"); n != 1 {
				t.Errorf("Open left %d tables, want the 1 that was there", n)
			}
		})
	}
}

func TestSchemaTooNew(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	s.Close()
	newer := strconv.Itoa(postgres.SchemaVersion() + 1)
	rawExec(t, dsn, "UPDATE gpumeter_meta SET value = '"+newer+"' WHERE key = 'schema_version'")
	_, err := postgres.Open(context.Background(), dsn)
	if !errors.Is(err, ledger.ErrSchemaTooNew) || !strings.Contains(err.Error(), "version "+newer) {
		t.Errorf("Open = %v, want ledger.ErrSchemaTooNew naming version %s", err, newer)
	}
}

// TestConcurrentOpen opens one new database from several agents at once.
func TestConcurrentOpen(t *testing.T) {
	dsn := pgtest.DSN(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
}

// oneMinute is a batch that adds v to one usage, GPU and container row.
func oneMinute(node string, start time.Time, v float64) ledger.Batch {
	return ledger.Batch{
		Usage: []ledger.Usage{{Node: node, Start: start, OwnerKind: ledger.KindContainer, OwnerID: "c", GPU: "GPU-0",
			Sums: ledger.Sums{UsedSeconds: v}}},
		GPUUsage:       []ledger.GPUUsage{{Node: node, Start: start, GPU: "GPU-0", GPUSums: ledger.GPUSums{Seconds: v}}},
		ContainerUsage: []ledger.ContainerUsage{{Node: node, Start: start, ContainerID: "c", CPUSeconds: v}},
	}
}

func TestReopenKeepsData(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	s := open(t, dsn)
	if err := s.Write(ctx, oneMinute("n", start, 2)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dsn)
	if err := s.Write(ctx, oneMinute("n", start, 3)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Usage(ctx, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].UsedSeconds != 5 || got[0].CPUSeconds != 5 {
		t.Errorf("Usage = %+v, want one row with 5 used and 5 CPU seconds", got)
	}
}

// TestFailureMidBatch makes the last statement of a batch fail inside
// PostgreSQL and checks that nothing of the batch stays.
func TestFailureMidBatch(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	rawExec(t, dsn, `CREATE FUNCTION fail() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.cpu_us = 13131313 THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER fail BEFORE INSERT ON container_hour FOR EACH ROW EXECUTE FUNCTION fail()`)
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	b := oneMinute("n", start, 13.131313)
	b.Nodes = []ledger.Node{{Name: "n", FirstSeen: start, LastSeen: start}}
	b.GPUs = []ledger.GPU{{Node: "n", UUID: "GPU-0", Model: "X"}}
	b.Containers = []ledger.Container{{Node: "n", ID: "c", Name: "c"}}
	if err := s.Write(ctx, b); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Write = %v, want the injected failure", err)
	}
	for _, table := range []string{"nodes", "gpus", "owners", "containers", "usage_minute", "usage_hour", "gpu_minute", "gpu_hour", "container_minute", "container_hour"} {
		if n := rawCount(t, dsn, table); n != 0 {
			t.Errorf("%s has %d rows after a failed batch, want 0", table, n)
		}
	}
	rawExec(t, dsn, "DROP TRIGGER fail ON container_hour")
	if err := s.Write(ctx, oneMinute("n", start, 1)); err != nil {
		t.Fatal(err)
	}
}

// TestTwoAgents has the agents of two nodes write one database at once,
// each from several goroutines, while reports read it.
func TestTwoAgents(t *testing.T) {
	dsn := pgtest.DSN(t)
	agents := map[string]*postgres.Store{"node-a": open(t, dsn), "node-b": open(t, dsn)}
	const goroutines, batches = 4, 100
	start := time.Date(2025, 1, 1, 9, 58, 0, 0, time.UTC)
	batch := func(node string, i int) ledger.Batch {
		var b ledger.Batch
		b.Nodes = []ledger.Node{{Name: node, FirstSeen: start, LastSeen: start.Add(time.Duration(i) * time.Second)}}
		for m := range 4 { // 09:58 to 10:01, across an hour
			st := start.Add(time.Duration(m) * time.Minute)
			for g := range 4 {
				gpu := fmt.Sprintf("GPU-%s-%d", node, g)
				for _, o := range []struct{ kind, id string }{{ledger.KindContainer, "ctr-1"}, {ledger.KindContainer, "ctr-2"}, {ledger.KindHost, "root"}, {ledger.KindNone, ""}} {
					b.Usage = append(b.Usage, ledger.Usage{Node: node, Start: st, OwnerKind: o.kind, OwnerID: o.id, GPU: gpu,
						Sums: ledger.Sums{AllocatedSeconds: 0.5, UsedSeconds: 0.25, EnergyJoules: 1.5}})
				}
				b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: node, Start: st, GPU: gpu, GPUSums: ledger.GPUSums{Seconds: 1}})
			}
			for _, c := range []string{"ctr-1", "ctr-2"} {
				b.ContainerUsage = append(b.ContainerUsage, ledger.ContainerUsage{Node: node, Start: st, ContainerID: c, CPUSeconds: 2})
			}
		}
		return b
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg, readers sync.WaitGroup
	errs := make(chan error, 2*goroutines+1)
	for node, s := range agents {
		for g := range goroutines {
			wg.Go(func() {
				for i := range batches {
					if err := s.Write(context.Background(), batch(node, i)); err != nil {
						errs <- fmt.Errorf("%s writer %d: %w", node, g, err)
						return
					}
				}
			})
		}
	}
	readers.Go(func() {
		for ctx.Err() == nil {
			if _, err := agents["node-a"].Usage(ctx, ledger.Filter{}); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("reader: %w", err)
				return
			}
		}
	})
	wg.Wait()
	cancel()
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	const n = goroutines * batches
	for _, f := range []ledger.Filter{{}, {From: start, To: start.Add(4 * time.Minute)}} {
		for node := range agents {
			f.Node = node
			rows, err := agents["node-a"].Usage(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 16 {
				t.Errorf("%s: %d usage rows, want 16 (4 GPUs × 4 owners)", node, len(rows))
			}
			var cpu float64
			for _, r := range rows {
				if r.Node != node || r.AllocatedSeconds != n*4*0.5 || r.UsedSeconds != n*4*0.25 || r.EnergyJoules != n*4*1.5 {
					t.Errorf("%s: row %s %s on %s = %+v, want %v allocated seconds", node, r.OwnerKind, r.OwnerID, r.GPU.UUID, r.Sums, n*4*0.5)
				}
				cpu += r.CPUSeconds
			}
			if cpu != n*4*2*2 {
				t.Errorf("%s: %v CPU seconds, want %v", node, cpu, n*4*2*2)
			}
			gpus, err := agents["node-b"].GPUs(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gpus {
				if g.Seconds != n*4 {
					t.Errorf("%s: GPU %s %v seconds, want %v", node, g.GPU.UUID, g.Seconds, n*4)
				}
			}
		}
	}
}

// TestUpgradeFromVersion2 opens a version 2 ledger holding a policy audit
// event: the event survives the migration with the API fields empty, and
// API events can be added beside it.
func TestUpgradeFromVersion2(t *testing.T) {
	dsn := pgtest.DSN(t)
	var stmts []string
	for _, name := range []string{"0001_init.sql", "0002_audit.sql"} {
		b, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(b))
	}
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	stmts = append(stmts,
		"INSERT INTO gpumeter_meta VALUES ('magic', 'gpumeter ledger'), ('schema_version', '2')",
		fmt.Sprintf(`INSERT INTO audit_events (at_us, node, kind, rule, finding_id, container_id, container, owner, evidence, dry_run, outcome, attempts, error)
			VALUES (%d, 'n1', 'stop', 'idle', 'idle-1', 'abc', 'nb', 'carol', '{}', false, 'stopped', 0, '')`, at.UnixMicro()))
	rawExec(t, dsn, stmts...)

	ledgertest.AuditAfterUpgrade(t, open(t, dsn), at)
	if n := rawCount(t, dsn, "gpumeter_meta WHERE key = 'schema_version' AND value = '"+strconv.Itoa(postgres.SchemaVersion())+"'"); n != 1 {
		t.Errorf("schema_version is not %d after the upgrade", postgres.SchemaVersion())
	}
}

// TestUpgradeFromV3 restores a dump of a ledger written by the release at
// schema version 3: it migrates, and reads what that release read.
func TestUpgradeFromV3(t *testing.T) {
	dump, err := os.ReadFile(filepath.Join(ledgertest.V3Dir, "ledger.sql"))
	if err != nil {
		t.Fatal(err)
	}
	dsn := pgtest.DSN(t)
	rawExec(t, dsn, string(dump))
	ledgertest.UpgradeFromV3(t, open(t, dsn))
	if n := rawCount(t, dsn, "gpumeter_meta WHERE key = 'schema_version' AND value = '"+strconv.Itoa(postgres.SchemaVersion())+"'"); n != 1 {
		t.Errorf("schema_version is not %d after the upgrade", postgres.SchemaVersion())
	}
}

func TestLeases(t *testing.T) {
	ledgertest.RunLeases(t, func(t *testing.T) (ledger.Ledger, ledger.Ledger) {
		dsn := pgtest.DSN(t)
		return open(t, dsn), open(t, dsn)
	}, false)
}

// TestLostCommitReply sends a batch through a proxy that forwards its
// COMMIT and cuts the connection before the reply: Write fails though the
// batch is in. Sent again under the same ID, it must add nothing; without
// an ID it would count twice, which is why the recorder always sends one.
func TestLostCommitReply(t *testing.T) {
	dsn := pgtest.DSN(t)
	proxy, via := pgtest.NewProxy(t, dsn)
	s := open(t, via)
	ctx := context.Background()
	l, err := s.Acquire(ctx, ledger.Lease{Node: "n1", Instance: "i1", Host: "h", PID: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	b := ledger.Batch{
		ID:       ledger.BatchID{Node: "n1", Instance: l.Instance, Seq: 1},
		Usage:    []ledger.Usage{{Node: "n1", Start: at, OwnerKind: ledger.KindHost, OwnerID: "ivan", GPU: "GPU-1", Sums: ledger.Sums{UsedSeconds: 30}}},
		GPUUsage: []ledger.GPUUsage{{Node: "n1", Start: at, GPU: "GPU-1", GPUSums: ledger.GPUSums{Seconds: 60, UsedSeconds: 30}}},
	}
	proxy.DropNextCommits(1)
	if err := s.Write(ctx, b); err == nil {
		t.Fatal("Write through a cut COMMIT reply succeeded, want an error")
	}
	if _, dropped := proxy.Counts(); dropped != 1 {
		t.Fatalf("proxy cut %d COMMIT replies, want 1", dropped)
	}
	if n := rawCount(t, dsn, "node_leases WHERE node = 'n1' AND seq = 1"); n != 1 {
		t.Fatalf("the batch did not commit behind the cut reply: the test proves nothing")
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatalf("Write again: %v", err)
	}
	rows, gpus, err := s.Totals(ctx, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].UsedSeconds != 30 || len(gpus) != 1 || gpus[0].Seconds != 60 {
		t.Errorf("after a lost reply and a retry: rows %+v, GPUs %+v; want the batch once (30 used, 60 seconds)", rows, gpus)
	}
}
