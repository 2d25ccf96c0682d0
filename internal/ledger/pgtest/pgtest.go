// Package pgtest gives tests a real PostgreSQL: a throwaway server started
// once per test binary from the PostgreSQL binaries on the machine, and a
// fresh database per test.
//
// Where the server comes from, in order:
//   - $GPUMETER_TEST_PG_DSN: an existing server (a superuser or a role
//     that may CREATE DATABASE); each test gets a database that is dropped
//     after it.
//   - initdb and postgres from $GPUMETER_TEST_PG_BIN, else the newest
//     /usr/lib/postgresql/*/bin, else $PATH: a cluster in a temporary
//     directory, listening on a free loopback port and a socket in that
//     directory, with fsync off. PostgreSQL refuses to run as root, so when
//     the tests run as root the server runs as $GPUMETER_TEST_PG_USER, else
//     the "postgres" user, else "nobody" (no user is created); the
//     temporary directory is given to that user.
//
// Without either, tests that ask for a database are skipped, or fail when
// CI is set (see internal/testenv).
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// Environment variables read by this package.
const (
	EnvDSN  = "GPUMETER_TEST_PG_DSN"
	EnvBin  = "GPUMETER_TEST_PG_BIN"
	EnvUser = "GPUMETER_TEST_PG_USER"
)

// The one server of this test binary: started by the first DSN call,
// stopped by Main.
var (
	once   sync.Once
	srv    *server
	srvErr error
	dbSeq  atomic.Int64
)

// Main runs the tests and stops the server they started. Call it from
// TestMain: func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	return code
}

// errMissing marks "no PostgreSQL here", which skips outside CI.
var errMissing = errors.New("PostgreSQL is not available")

// DSN returns the connection string of a new, empty database for t.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(func() { srv, srvErr = start() })
	if srvErr != nil {
		if errors.Is(srvErr, errMissing) && !testenv.InCI() {
			t.Skipf("skipping: %v", srvErr)
		}
		t.Fatalf("PostgreSQL test server: %v", srvErr)
	}
	name := fmt.Sprintf("gpumeter_test_%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	if srv.external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := srv.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
				t.Errorf("drop test database: %v", err)
			}
		})
	}
	dsn, err := withDatabase(srv.dsn, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// withDatabase points a URL or keyword/value DSN at database name.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvDSN, err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil // the last setting wins
}

type server struct {
	dsn      string // of the "postgres" database
	external bool
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
	log      *os.File
	// How postgres was started, so that Restart starts it alike.
	bin  string
	cred *syscall.Credential
	env  []string
	port int
}

func (s *server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func start() (*server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		s := &server{dsn: dsn, external: true}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.exec(ctx, "SELECT 1"); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvDSN, err)
		}
		return s, nil
	}
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpumeter-pg-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir}
	if err := s.run(bin, cred); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *server) run(bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(s.dir, "data")
	env := []string{"LC_ALL=C", "LANG=C", "HOME=" + s.dir, "PATH=" + bin + ":/usr/bin:/bin"}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Env = env
	initdb.Dir = s.dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb as %s: %w\n%s\n(the user must be able to reach %s)", who(cred), err, out, s.dir)
	}

	port, err := freePort()
	if err != nil {
		return err
	}
	if s.log, err = os.Create(filepath.Join(s.dir, "postgres.log")); err != nil {
		return err
	}
	s.bin, s.cred, s.env, s.port = bin, cred, env, port
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
	return s.launch()
}

// launch starts postgres on the cluster initdb made and waits until it
// answers.
func (s *server) launch() error {
	data := filepath.Join(s.dir, "data")
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), "-D", data,
		"-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	s.cmd.Env = s.env
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// If this test binary dies without stopping the server, the kernel
	// asks the server to shut down fast (SIGINT).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	s.exited = exited
	cmd := s.cmd
	go func() {
		cmd.Wait()
		close(exited)
	}()

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.exec(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited: %s", s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after 60s: %v\n%s", err, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// Restart stops the test server and starts it again on the same port
// and cluster, as an operator's restart of PostgreSQL would: every
// session ends (their transactions roll back, their locks and LISTENs go),
// new connections are refused until it is up, and then the databases are
// as they were. It fails the test when the server is not one this package
// started (one $GPUMETER_TEST_PG_DSN names), and must not run while a
// test that does not expect it uses the server.
func Restart(t testing.TB) {
	t.Helper()
	if srv == nil || srvErr != nil {
		t.Fatal("pgtest.Restart: no test server; call DSN first")
	}
	if srv.external {
		t.Fatalf("pgtest.Restart: the server %s names is not this package's to restart", EnvDSN)
	}
	srv.halt()
	if err := srv.launch(); err != nil {
		t.Fatalf("pgtest.Restart: %v", err)
	}
}

// halt shuts the server down fast (SIGINT) and waits for it to exit.
func (s *server) halt() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
}

// stop shuts the server down fast and removes its directory.
func (s *server) stop() {
	s.halt()
	if s.log != nil {
		s.log.Close()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// findBin finds a directory holding initdb and postgres.
func findBin() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv(EnvBin); dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("%s=%s holds no initdb and postgres", EnvBin, dir)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first.
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("%w: no initdb and postgres in $%s, /usr/lib/postgresql/*/bin or $PATH; install PostgreSQL (apt-get install postgresql) or set %s to a server",
		errMissing, EnvBin, EnvDSN)
}

// credential returns who the server runs as: nil for this process's user,
// or an unprivileged user when this process is root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	names := []string{"postgres", "nobody"}
	if n := os.Getenv(EnvUser); n != "" {
		names = []string{n}
	}
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and none of the users %s exists to run PostgreSQL as; set %s", strings.Join(names, ", "), EnvUser)
}

func who(cred *syscall.Credential) string {
	if cred == nil {
		return "the current user"
	}
	return fmt.Sprintf("uid %d", cred.Uid)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
