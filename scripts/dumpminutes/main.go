// Command dumpminutes prints every minute a SQLite ledger holds (usage per
// owner and GPU, per GPU, and per container), read through the ledger's
// own readers, one line per row, so that two ledgers can be compared
// whatever layout keeps their minutes. It reads a copy: a ledger of an
// older schema is migrated in the copy, never in place.
//
//	go run ./scripts/dumpminutes LEDGER.db > minutes.txt
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dumpminutes LEDGER.db")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dumpminutes:", err)
		os.Exit(1)
	}
}

func run(path string, w io.Writer) error {
	dir, err := os.MkdirTemp("", "dumpminutes")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cp := filepath.Join(dir, "ledger.db")
	// The write-ahead log too, where a writer left one.
	for _, suffix := range []string{"", "-wal"} {
		if err := copyFile(path+suffix, cp+suffix); err != nil && (suffix == "" || !os.IsNotExist(err)) {
			return err
		}
	}
	ctx := context.Background()
	from, to, err := reach(ctx, cp)
	if err != nil || from.IsZero() {
		return err
	}
	s, err := sqlite.Open(ctx, cp)
	if err != nil {
		return err
	}
	defer s.Close()
	out := bufio.NewWriter(w)
	defer out.Flush()
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	// A day at a time, over every day that has hour rows.
	for day := from; day.Before(to); day = day.Add(24 * time.Hour) {
		f := ledger.Filter{From: day, To: day.Add(24 * time.Hour)}
		usage, err := s.Series(ctx, f, time.Minute)
		if err != nil {
			return err
		}
		for _, p := range usage {
			fmt.Fprintln(out, "usage", p.Start.Unix(), p.Node, p.OwnerKind, p.OwnerID, p.GPU.UUID,
				g(p.AllocatedSeconds), g(p.HeldSeconds), p.Unheld.Rows, g(p.PresentSeconds), g(p.UsedSeconds),
				g(p.MemoryByteSeconds), g(p.EnergyJoules), p.PeakMemoryBytes, g(p.PeakUtil))
		}
		gpus, err := s.GPUUsageSeries(ctx, f, time.Minute)
		if err != nil {
			return err
		}
		for _, u := range gpus {
			x := u.Gauges
			fmt.Fprintln(out, "gpu", u.Start.Unix(), u.Node, u.GPU, g(u.Seconds), g(u.AllocatedSeconds), g(u.IdleSeconds),
				g(u.UsedSeconds), g(u.UnattributedSeconds), g(u.EnergyJoules), g(u.IdleEnergyJoules), g(u.PeakUtil),
				x.Samples, g(x.UtilSum), g(x.UtilMax), g(x.MemorySum), g(x.MemoryMax), g(x.PowerSum), g(x.PowerMax), g(x.TempSum), g(x.TempMax))
		}
		ctrs, err := s.ContainerSeries(ctx, f, time.Minute)
		if err != nil {
			return err
		}
		for _, c := range ctrs {
			fmt.Fprintln(out, "container", c.Start.Unix(), c.Node, c.ContainerID, g(c.CPUSeconds), g(c.RAMByteSeconds))
		}
	}
	return nil
}

// reach is the span of whole days that holds the ledger's hour rows.
func reach(ctx context.Context, path string) (from, to time.Time, err error) {
	h, err := sqlite.Check(ctx, path)
	if err != nil {
		return from, to, err
	}
	if h.HourRows[0].IsZero() {
		return from, to, nil
	}
	return h.HourRows[0].Truncate(24 * time.Hour), h.HourRows[1].Truncate(24 * time.Hour).Add(24 * time.Hour), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}
