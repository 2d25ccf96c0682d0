package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/agent"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/backend"
	"github.com/gpumeter/gpumeter/internal/report"
)

// ledgerFlags are the flags of the commands that read the ledger over a
// window (report, waste): the config, the ledger and the window.
type ledgerFlags struct {
	configPath, db, dsn, since, from, to string
}

func (lf *ledgerFlags) register(cmd *cobra.Command, what string) {
	f := cmd.Flags()
	f.StringVarP(&lf.configPath, "config", "c", "", "config file, for the ledger and "+what+" (default $GPUMETER_CONFIG, else "+defaultConfigPath+" if it exists)")
	f.StringVar(&lf.db, "db", "", "SQLite ledger to read")
	f.StringVar(&lf.dsn, "dsn", "", "PostgreSQL ledger to read")
	f.StringVar(&lf.since, "since", "", "window length ending at --to (default now), e.g. 24h or 7d (default 24h)")
	f.StringVar(&lf.from, "from", "", "window start: RFC 3339 or a date (2026-11-02)")
	f.StringVar(&lf.to, "to", "", "window end (exclusive): RFC 3339 or a date; default now")
}

// fromAgent says whether the command asks the agent rather than reading
// the ledger: with --url, or with $GPUMETER_URL unless --db or --dsn names
// a ledger. With the agent, the flags that only matter to reading the
// ledger here are refused rather than ignored.
func (lf *ledgerFlags) fromAgent(cmd *cobra.Command) (bool, error) {
	f := cmd.Flags()
	local := lf.db != "" || lf.dsn != ""
	if f.Changed("url") && local {
		return false, errors.New("--url asks the agent, --db and --dsn read a ledger here: give one or the other")
	}
	remote := f.Changed("url") || (os.Getenv("GPUMETER_URL") != "" && !local)
	switch {
	case !remote && f.Changed("ca-file"):
		return false, errors.New("--ca-file is for an agent named by --url or $GPUMETER_URL")
	case remote && f.Changed("config"):
		return false, errors.New("--config: the agent uses its own config; --config is for reading a ledger here (--db, --dsn, or without --url and $GPUMETER_URL)")
	}
	return remote, nil
}

// window parses the window flags into req.
func (lf *ledgerFlags) window(req *report.Request) error {
	var err error
	if lf.db != "" && lf.dsn != "" {
		return errors.New("--db and --dsn exclude each other")
	}
	if lf.since != "" {
		if req.Since, err = config.ParseDuration(lf.since); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
		if req.Since == 0 {
			return errors.New("--since: must be more than 0")
		}
	}
	if lf.from != "" {
		if req.From, err = report.ParseTime(lf.from); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
	}
	if lf.to != "" {
		if req.To, err = report.ParseTime(lf.to); err != nil {
			return fmt.Errorf("--to: %w", err)
		}
	}
	return nil
}

// validate validates the request, naming the flag at fault.
func validate(req *report.Request) error {
	if err := req.Validate(time.Now()); err != nil {
		var re *report.RequestError
		if errors.As(err, &re) && re.Param != "" {
			return fmt.Errorf("--%s: %s", re.Param, re.Msg)
		}
		return err
	}
	return nil
}

// open opens the ledger the flags name, else the config's.
func (lf *ledgerFlags) open(ctx context.Context, cfg *config.Config) (ledger.Store, error) {
	db, dsn := lf.db, lf.dsn
	if db == "" && dsn == "" {
		db, dsn = cfg.LedgerPath(), cfg.LedgerDSN
	}
	return backend.Open(ctx, dsn, db, false)
}

// openPriced opens the ledger and checks the config's price list against
// it: a price for a model the ledger never metered is most likely
// misspelt, and would silently fall back to the default price.
func (lf *ledgerFlags) openPriced(ctx context.Context, cfg *config.Config) (ledger.Store, report.CostModel, error) {
	cost := agent.CostModel(cfg.Cost)
	if err := cost.Validate(nil); err != nil {
		return nil, cost, fmt.Errorf("config cost: %w", err)
	}
	store, err := lf.open(ctx, cfg)
	if err != nil {
		return nil, cost, err
	}
	models, err := report.Models(ctx, store)
	if err == nil {
		err = cost.Validate(models)
		if err != nil {
			err = fmt.Errorf("config cost: %w", err)
		}
	}
	if err != nil {
		store.Close()
		return nil, cost, err
	}
	return store, cost, nil
}
