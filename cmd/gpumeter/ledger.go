package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

// ledgerTarget names the ledger of the ledger subcommands: --db, --dsn,
// else the config's.
type ledgerTarget struct {
	configPath, db, dsn string
}

func (lt *ledgerTarget) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&lt.configPath, "config", "c", "", "config file naming the ledger (default $GPUMETER_CONFIG, else "+defaultConfigPath+" if it exists)")
	f.StringVar(&lt.db, "db", "", "SQLite ledger (default: ledger.db in the config's data_dir)")
	f.StringVar(&lt.dsn, "dsn", "", "PostgreSQL ledger")
}

// resolve returns the SQLite file or the PostgreSQL DSN to work on.
func (lt *ledgerTarget) resolve(cmd *cobra.Command) (db, dsn string, err error) {
	if lt.db != "" && lt.dsn != "" {
		return "", "", errors.New("--db and --dsn exclude each other")
	}
	if lt.db != "" || lt.dsn != "" {
		return lt.db, lt.dsn, nil
	}
	cfg, err := loadConfig(cmd, lt.configPath)
	if err != nil {
		return "", "", err
	}
	if cfg.LedgerDSN != "" {
		return "", cfg.LedgerDSN, nil
	}
	return cfg.LedgerPath(), "", nil
}

func newLedger() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Back up and check the usage ledger",
		Long: `Back up the ledger before an upgrade, and check it: both read the ledger as
it is, without migrating it and without stopping a running agent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("ledger needs a subcommand: backup FILE or check")
		},
	}
	cmd.AddCommand(newLedgerBackup(), newLedgerCheck())
	return cmd
}

func newLedgerBackup() *cobra.Command {
	var lt ledgerTarget
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Copy the SQLite ledger to FILE, safely while the agent writes",
		Long: `Copy the SQLite ledger to FILE (a new file, mode 0600) with SQLite's VACUUM
INTO: one consistent snapshot, compacted, taken while the agent goes on
writing, and nothing migrated. Restore by stopping the agent and putting the
file in place of data_dir/ledger.db. A PostgreSQL ledger is backed up with
pg_dump.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("ledger backup needs the file to write, e.g. gpumeter ledger backup /root/ledger-2026-12-01.db")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			db, dsn, err := lt.resolve(cmd)
			if err != nil {
				return err
			}
			if dsn != "" {
				return errors.New("a PostgreSQL ledger is backed up with PostgreSQL's own tools: pg_dump --format=custom --file FILE with the ledger's connection settings (pg_restore restores it)")
			}
			began := time.Now()
			if err := sqlite.Backup(cmd.Context(), db, args[0]); err != nil {
				return err
			}
			h, err := sqlite.Check(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("the backup %s does not read back: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s (%s, schema version %d) in %s\n",
				db, args[0], sizeText(h.SizeBytes), h.SchemaVersion, time.Since(began).Round(time.Millisecond))
			return nil
		},
	}
	lt.register(cmd)
	return cmd
}

func newLedgerCheck() *cobra.Command {
	var lt ledgerTarget
	var format string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the ledger: integrity, schema version, nodes, first and last rows, leases",
		Long: `Check the ledger without changing it: SQLite's integrity check (PostgreSQL
checks its own pages), the schema version against this gpumeter's, the
nodes, the first and last minute and hour rows, and who holds each node's
lease. It exits 1 when the integrity check finds a fault.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("ledger check takes no arguments; name the ledger with --db FILE or --dsn DSN")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("--format: %q is not table or json", format)
			}
			db, dsn, err := lt.resolve(cmd)
			if err != nil {
				return err
			}
			var h ledger.Health
			if dsn != "" {
				h, err = postgres.Check(cmd.Context(), dsn)
			} else {
				h, err = sqlite.Check(cmd.Context(), db)
			}
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(h); err != nil {
					return err
				}
			} else {
				writeHealth(cmd.OutOrStdout(), h, sqlite.SchemaVersion(), time.Now())
			}
			if len(h.Integrity) > 0 {
				return fmt.Errorf("the integrity check found %d faults in %s: stop the agent and restore the last backup (gpumeter ledger backup makes one)", len(h.Integrity), h.Where)
			}
			return nil
		},
	}
	lt.register(cmd)
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	completeValues(cmd, "format", "table", "json")
	return cmd
}

// writeHealth prints a check for a person.
func writeHealth(w io.Writer, h ledger.Health, writes int, now time.Time) {
	const stamp = "2006-01-02 15:04 MST"
	line := func(k, format string, args ...any) { fmt.Fprintf(w, "%-10s %s\n", k, fmt.Sprintf(format, args...)) }
	line("ledger", "%s (%s, %s)", h.Where, h.Backend, sizeText(h.SizeBytes))
	switch {
	case h.SchemaVersion < writes:
		line("schema", "version %d; this gpumeter writes %d, and the next agent or simulate to open the ledger migrates it (back it up first)", h.SchemaVersion, writes)
	default:
		line("schema", "version %d, as this gpumeter writes", h.SchemaVersion)
	}
	switch {
	case !h.IntegrityChecked:
		line("integrity", "not checked here: PostgreSQL checks its pages itself (pg_amcheck goes deeper)")
	case len(h.Integrity) == 0:
		line("integrity", "ok")
	default:
		line("integrity", "%d faults:", len(h.Integrity))
		for _, p := range h.Integrity {
			fmt.Fprintf(w, "%-10s   %s\n", "", p)
		}
	}
	if len(h.Nodes) == 0 {
		line("nodes", "none yet")
	}
	for i, n := range h.Nodes {
		k := ""
		if i == 0 {
			k = "nodes"
		}
		seen := "never described by a batch"
		if !n.FirstSeen.IsZero() {
			seen = fmt.Sprintf("seen %s to %s", n.FirstSeen.UTC().Format(stamp), n.LastSeen.UTC().Format(stamp))
		}
		line(k, "%s: %s", n.Name, seen)
	}
	span := func(k string, s [2]time.Time) {
		if s[0].IsZero() {
			line(k, "none")
			return
		}
		line(k, "%s to %s (starts of the first and last row)", s[0].UTC().Format(stamp), s[1].UTC().Format(stamp))
	}
	span("minutes", h.MinuteRows)
	span("hours", h.HourRows)
	for _, l := range h.Leases {
		state := fmt.Sprintf("held by pid %d on %s since %s, last seen %s ago (batch %d)", l.PID, l.Host,
			l.Started.UTC().Format(stamp), now.Sub(l.Heartbeat).Round(time.Second), l.Seq)
		if l.Released {
			state = fmt.Sprintf("released by pid %d on %s at %s", l.PID, l.Host, l.Heartbeat.UTC().Format(stamp))
		}
		line("lease", "%s: %s", l.Node, state)
	}
}

// sizeText writes a byte count as a person reads it.
func sizeText(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	v := float64(n)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + units[i]
}
