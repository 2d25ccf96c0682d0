package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/backend"
)

// unservedFunc says why the agent cannot serve a flag the user set, or
// nil when it can. A command's flags the agent cannot serve send it to
// the ledger when nobody named an agent, and are refused when someone
// did.
type unservedFunc func(f *pflag.Flag) error

// chooseSource decides where report, waste and audit read; it is the one
// place that does. In order:
//
//  1. --db or --dsn: that ledger.
//  2. An agent named by --url, $GPUMETER_URL or url: in the client
//     config: that agent. A flag it cannot serve is an error.
//  3. --config, or another flag the agent cannot serve: the ledger the
//     config names.
//  4. The local agent over its socket (as ps finds it), else the demo
//     this user runs over its own, when one answers there. A socket this user may not open is an error that says what
//     to do, not a reason to read something else.
//  5. The ledger the config names.
//
// It returns the agent's client, or nil when the ledger is to be read.
func chooseSource(cmd *cobra.Command, lf *ledgerFlags, cf *clientFlags, env client.Env, unserved unservedFunc) (*agentClient, error) {
	f := cmd.Flags()
	local := lf.db != "" || lf.dsn != ""
	if lf.db != "" && lf.dsn != "" {
		return nil, errors.New("--db and --dsn exclude each other")
	}
	if f.Changed("url") && local {
		return nil, errors.New("--url asks the agent, --db and --dsn read a ledger here: give one or the other")
	}
	if local {
		if f.Changed("ca-file") {
			return nil, errors.New("--ca-file is for an agent named by --url or $GPUMETER_URL; --db and --dsn read a ledger here")
		}
		return nil, nil
	}
	s, err := client.Resolve(client.Flags(*cf), env)
	if err != nil {
		return nil, err
	}
	if s.Named() {
		if f.Changed("config") {
			return nil, fmt.Errorf("--config: the agent (from %s) uses its own config; --config is for reading a ledger here (--db, --dsn, or without an agent named)", s.URLFrom)
		}
		var bad error
		f.Visit(func(fl *pflag.Flag) {
			if bad == nil && unserved != nil {
				bad = unserved(fl)
			}
		})
		if bad != nil {
			return nil, bad
		}
		return newAgentClient(cmd, s)
	}
	if f.Changed("ca-file") {
		return nil, errors.New("--ca-file is for an agent named by --url or $GPUMETER_URL")
	}
	ledgerOnly := ""
	if f.Changed("config") {
		ledgerOnly = "config"
	}
	f.Visit(func(fl *pflag.Flag) {
		if ledgerOnly == "" && unserved != nil && unserved(fl) != nil {
			ledgerOnly = fl.Name
		}
	})
	socket := s.LocalSocket()
	if socket == "" {
		return nil, nil
	}
	switch err := probeSocket(cmd.Context(), socket); {
	case err == nil && ledgerOnly != "":
		// The ledger it is passed over for may not be the one it
		// writes (the demo's is its own): a ledger that fails to open
		// says so.
		lf.passedOver = fmt.Sprintf("--%s reads a ledger, not the agent running at %s: leave it out to ask the agent", ledgerOnly, s.URL)
		return nil, nil
	case err == nil:
		return newAgentClient(cmd, s)
	case errors.Is(err, fs.ErrPermission) && ledgerOnly == "":
		return nil, &client.SocketDeniedError{Path: socket}
	}
	// A socket file left by an agent that stopped: nobody serves there.
	return nil, nil
}

// probeSocket says whether an agent accepts connections on the socket at
// path.
func probeSocket(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return fs.ErrPermission
		}
		return err
	}
	return c.Close()
}

// ledgerStore is an open ledger and what the CLI says about it.
type ledgerStore struct {
	ledger.Ledger
	// models are the GPU models it metered, sorted.
	models []string
}

// open opens the ledger the flags name, else the config's, and says on
// stderr which one and whose nodes it holds.
func (lf *ledgerFlags) open(cmd *cobra.Command, cfg *config.Config) (*ledgerStore, error) {
	ctx := cmd.Context()
	db, dsn := lf.db, lf.dsn
	if db == "" && dsn == "" {
		db, dsn = cfg.LedgerPath(), cfg.LedgerDSN
	}
	if dsn == "" {
		if err := checkReadable(db); err != nil {
			return nil, err
		}
	}
	store, err := backend.Open(ctx, dsn, db, false)
	if err != nil {
		if lf.passedOver != "" {
			err = fmt.Errorf("%w; %s", err, lf.passedOver)
		}
		return nil, err
	}
	gpus, err := store.KnownGPUs(ctx)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("read the ledger's GPUs: %w", err)
	}
	ls := &ledgerStore{Ledger: store}
	var nodes []string
	for _, g := range gpus {
		if !slices.Contains(nodes, g.Node) {
			nodes = append(nodes, g.Node)
		}
		if g.Model != "" && !slices.Contains(ls.models, g.Model) {
			ls.models = append(ls.models, g.Model)
		}
	}
	slices.Sort(nodes)
	slices.Sort(ls.models)
	where := db
	if dsn != "" {
		where = redactDSN(dsn)
	}
	list := "none yet"
	if len(nodes) > 0 {
		list = strings.Join(nodes, ", ")
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "reading the ledger %s (nodes: %s)\n", where, list)
	return ls, nil
}

// checkReadable names a SQLite ledger this user may not read, and what to
// do, before the driver reports it as a file it cannot open.
func checkReadable(path string) error {
	f, err := os.Open(path)
	if err == nil {
		return f.Close()
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("the ledger %s: permission denied: only root and the agent's own user may read it (and members of the agent's data_group, when it sets one); run this with sudo, join data_group, or ask the agent with a token: GPUMETER_TOKEN=gpm_… and --url http(s)://HOST:PORT (an admin makes a token with `gpumeter token create`)", path)
	}
	// A missing file is named by the ledger's own open, with its advice.
	return nil
}

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)

// redactDSN is a PostgreSQL DSN without its password, to print.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return dsnPassword.ReplaceAllString(dsn, "${1}xxxxx")
}
