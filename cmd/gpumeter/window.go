package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/units"
)

// ledgerFlags are the flags of the commands that read the ledger over a
// window (report, waste): the config, the ledger and the window.
type ledgerFlags struct {
	configPath, db, dsn, since, from, to string
	// passedOver says why the local agent was passed over for the
	// ledger; "" when it was not.
	passedOver string
}

func (lf *ledgerFlags) register(cmd *cobra.Command, what string) {
	lf.registerLedger(cmd, what)
	f := cmd.Flags()
	f.StringVar(&lf.since, "since", "", "window length ending at --to (default now), e.g. 24h or 7d (default 24h)")
	f.StringVar(&lf.from, "from", "", "window start: RFC 3339 or a date (2026-11-02)")
	f.StringVar(&lf.to, "to", "", "window end (exclusive): RFC 3339 or a date; default now")
}

// registerLedger registers the flags that name a ledger (audit's, which
// has a window of its own).
func (lf *ledgerFlags) registerLedger(cmd *cobra.Command, what string) {
	f := cmd.Flags()
	f.StringVarP(&lf.configPath, "config", "c", "", "config file, for the ledger and "+what+" (default $GPUMETER_CONFIG, else "+defaultConfigPath+" if it exists)")
	f.StringVar(&lf.db, "db", "", "SQLite ledger to read")
	f.StringVar(&lf.dsn, "dsn", "", "PostgreSQL ledger to read")
}

// window parses the window flags into req.
func (lf *ledgerFlags) window(req *report.Request) error {
	var err error
	if lf.since != "" {
		if req.Since, err = units.ParseDuration(lf.since); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
		if req.Since == 0 {
			return errors.New("--since: must be more than 0")
		}
	}
	if lf.from != "" {
		t, err := units.ParseTime(lf.from)
		if err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		req.From = &t
	}
	if lf.to != "" {
		t, err := units.ParseTime(lf.to)
		if err != nil {
			return fmt.Errorf("--to: %w", err)
		}
		req.To = &t
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

// openPriced opens the ledger and checks the config's price list against
// it: a price for a model the ledger never metered is most likely
// misspelt, and would silently fall back to the default price.
func (lf *ledgerFlags) openPriced(cmd *cobra.Command, cfg *config.Config) (ledger.Ledger, cost.Model, error) {
	prices := cost.Model(cfg.Cost)
	if err := prices.Check(); err != nil {
		return nil, prices, fmt.Errorf("config cost: %w", err)
	}
	store, err := lf.open(cmd, cfg)
	if err != nil {
		return nil, prices, err
	}
	if err := prices.Check(store.models); err != nil {
		store.Close()
		return nil, prices, fmt.Errorf("config cost: %w", err)
	}
	return store, prices, nil
}
