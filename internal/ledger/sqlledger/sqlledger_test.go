package sqlledger

import (
	"errors"
	"math"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

var t0 = time.Date(2025, 3, 10, 8, 0, 0, 0, time.UTC)

func at(h, m int) time.Time {
	return t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
}

func unix(h, m int) int64 { return at(h, m).Unix() }

func TestPlanWindow(t *testing.T) {
	tests := []struct {
		name    string
		f       ledger.Filter
		horizon int64
		want    Plan
	}{
		{"WholeHours", ledger.Filter{From: at(0, 0), To: at(3, 0)}, NoHorizon,
			Plan{Window: Range{unix(0, 0), unix(3, 0)}, Hours: Range{unix(0, 0), unix(3, 0)}}},
		{"Edges", ledger.Filter{From: at(0, 17), To: at(3, 43)}, NoHorizon,
			Plan{Window: Range{unix(0, 17), unix(3, 43)}, Hours: Range{unix(1, 0), unix(3, 0)},
				Minutes: []Range{{unix(0, 17), unix(1, 0)}, {unix(3, 0), unix(3, 43)}}}},
		{"InsideOneHour", ledger.Filter{From: at(0, 17), To: at(0, 43)}, NoHorizon,
			Plan{Window: Range{unix(0, 17), unix(0, 43)}, Minutes: []Range{{unix(0, 17), unix(0, 43)}}}},
		{"TwoPartialHours", ledger.Filter{From: at(0, 17), To: at(1, 43)}, NoHorizon,
			Plan{Window: Range{unix(0, 17), unix(1, 43)}, Minutes: []Range{{unix(0, 17), unix(1, 43)}}}},
		{"SecondsTruncated", ledger.Filter{From: at(0, 17).Add(59 * time.Second), To: at(0, 43).Add(time.Second)}, NoHorizon,
			Plan{Window: Range{unix(0, 17), unix(0, 43)}, Minutes: []Range{{unix(0, 17), unix(0, 43)}}}},
		{"Empty", ledger.Filter{From: at(1, 0), To: at(1, 0)}, NoHorizon, Plan{}},
		{"EmptyAfterTruncation", ledger.Filter{From: at(1, 0).Add(10 * time.Second), To: at(1, 0).Add(50 * time.Second)}, NoHorizon, Plan{}},
		{"Inverted", ledger.Filter{From: at(2, 0), To: at(1, 0)}, NoHorizon, Plan{}},
		{"Open", ledger.Filter{}, NoHorizon,
			Plan{Window: Range{minUnix, maxUnix}, Hours: Range{minUnix, maxUnix}}},
		{"OpenEnd", ledger.Filter{From: at(0, 17)}, NoHorizon,
			Plan{Window: Range{unix(0, 17), maxUnix}, Hours: Range{unix(1, 0), maxUnix}, Minutes: []Range{{unix(0, 17), unix(1, 0)}}}},
		{"StandInFrom", ledger.Filter{From: at(0, 17), To: at(3, 43)}, unix(2, 0),
			Plan{Window: Range{unix(0, 0), unix(3, 43)}, Hours: Range{unix(0, 0), unix(3, 0)}, Minutes: []Range{{unix(3, 0), unix(3, 43)}}}},
		{"StandInBoth", ledger.Filter{From: at(0, 17), To: at(3, 43)}, unix(5, 0),
			Plan{Window: Range{unix(0, 0), unix(4, 0)}, Hours: Range{unix(0, 0), unix(4, 0)}}},
		{"StandInOneHour", ledger.Filter{From: at(0, 17), To: at(0, 43)}, unix(1, 0),
			Plan{Window: Range{unix(0, 0), unix(1, 0)}, Hours: Range{unix(0, 0), unix(1, 0)}}},
		{"HorizonAtEdgeHour", ledger.Filter{From: at(1, 17), To: at(3, 43)}, unix(1, 0),
			Plan{Window: Range{unix(1, 17), unix(3, 43)}, Hours: Range{unix(2, 0), unix(3, 0)},
				Minutes: []Range{{unix(1, 17), unix(2, 0)}, {unix(3, 0), unix(3, 43)}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanWindow(tc.f, tc.horizon, NoDays)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PlanWindow mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetainCutoffs(t *testing.T) {
	m, mOK, h, hOK := RetainCutoffs(at(10, 17), 3*time.Hour, 6*time.Hour)
	if !mOK || !hOK || m != unix(7, 0) || h != unix(4, 0) {
		t.Errorf("RetainCutoffs = %v %v %v %v, want 15:00 and 12:00", time.Unix(m, 0).UTC(), mOK, time.Unix(h, 0).UTC(), hOK)
	}
	if _, mOK, _, hOK := RetainCutoffs(at(10, 17), 0, -time.Hour); mOK || hOK {
		t.Errorf("RetainCutoffs(0, -1h) deletes something")
	}
}

func TestRollup(t *testing.T) {
	u := func(start time.Time, owner, gpu string, used float64, peak uint64) ledger.Usage {
		return ledger.Usage{Node: "n", Start: start, OwnerKind: ledger.KindHost, OwnerID: owner, GPU: gpu,
			Sums: ledger.Sums{UsedSeconds: used, PeakMemoryBytes: peak}}
	}
	b := ledger.Batch{
		Usage: []ledger.Usage{
			u(at(1, 0), "b", "GPU-1", 1, 5),
			u(at(0, 59).Add(30*time.Second), "a", "GPU-1", 0.1, 7),
			u(at(0, 59), "a", "GPU-1", 0.2, 3),
			u(at(0, 58), "a", "GPU-1", 1e-7, 1), // below a microsecond: rounds to 0
		},
		ContainerUsage: []ledger.ContainerUsage{{Node: "n", Start: at(0, 1), ContainerID: "c", CPUSeconds: 2}},
		GPUs:           []ledger.GPU{{Node: "m", UUID: "GPU-9"}},
	}
	r, err := Rollup(&b)
	if err != nil {
		t.Fatal(err)
	}
	key := func(start time.Time, owner string) UsageKey {
		return UsageKey{Start: start.Unix(), Node: "n", GPU: "GPU-1", Kind: ledger.KindHost, Owner: owner}
	}
	wantMinute := []Row[UsageKey, UsageValues]{
		{key(at(0, 58), "a"), UsageValues{PeakMemory: 1}},
		{key(at(0, 59), "a"), UsageValues{UsedUS: 300000, PeakMemory: 7}},
		{key(at(1, 0), "b"), UsageValues{UsedUS: 1000000, PeakMemory: 5}},
	}
	wantHour := []Row[UsageKey, UsageValues]{
		{key(at(0, 0), "a"), UsageValues{UsedUS: 300000, PeakMemory: 7}},
		{key(at(1, 0), "b"), UsageValues{UsedUS: 1000000, PeakMemory: 5}},
	}
	if diff := cmp.Diff(wantMinute, r.UsageMinute); diff != "" {
		t.Errorf("minute rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantHour, r.UsageHour); diff != "" {
		t.Errorf("hour rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"m", "n"}, r.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]GPURef{{"m", "GPU-9"}, {"n", "GPU-1"}}, r.GPUs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	wantOwners := []OwnerRef{{"n", ledger.KindContainer, "c"}, {"n", ledger.KindHost, "a"}, {"n", ledger.KindHost, "b"}}
	if diff := cmp.Diff(wantOwners, r.Owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	if got := r.UsageMinute[1].Val.Sums().UsedSeconds; got != 0.3 {
		t.Errorf("0.1 + 0.2 seconds read back as %v, want 0.3", got)
	}

	b.Usage[0].EnergyJoules = math.Inf(-1)
	if _, err := Rollup(&b); !errors.Is(err, ledger.ErrInvalidBatch) {
		t.Errorf("Rollup(-Inf) = %v, want ledger.ErrInvalidBatch", err)
	}
}

func TestUsageValuesRoundTrip(t *testing.T) {
	s := ledger.Sums{AllocatedSeconds: 59.999999, PresentSeconds: 60, UsedSeconds: 0.000001, MemoryByteSeconds: 4.8e12,
		EnergyJoules: 24318.117, PeakMemoryBytes: 80 << 30, PeakUtil: 99.99}
	r, err := Rollup(&ledger.Batch{Usage: []ledger.Usage{{Node: "n", Start: t0, OwnerKind: ledger.KindNone, GPU: "g", Sums: s}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, r.UsageMinute[0].Val.Sums()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestLoadMigrations(t *testing.T) {
	good := fstest.MapFS{"0001_init.sql": {Data: []byte("CREATE TABLE a (x int);")}, "0002_more.sql": {Data: []byte("SELECT 1;")}}
	ms, err := LoadMigrations(good, ".")
	if err != nil || len(ms) != 2 || ms[1].Version != 2 || ms[1].SQL != "SELECT 1;" {
		t.Errorf("LoadMigrations = %+v, %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":     {"0001_a.sql": {}, "0003_c.sql": {}},
		"badname": {"0001_a.sql": {}, "2_b.sql": {}},
		"none":    {},
	} {
		if _, err := LoadMigrations(fsys, "."); err == nil {
			t.Errorf("LoadMigrations(%s) succeeded", name)
		}
	}
}

func TestPending(t *testing.T) {
	ms := []Migration{{Version: 1}, {Version: 2}}
	for _, tc := range []struct {
		name    string
		s       Schema
		pending int
		err     error
	}{
		{"New", Schema{}, 2, nil},
		{"Current", Schema{HasMeta: true, Magic: MagicValue, Version: "2"}, 0, nil},
		{"Older", Schema{HasMeta: true, Magic: MagicValue, Version: "1"}, 1, nil},
		{"Newer", Schema{HasMeta: true, Magic: MagicValue, Version: "3"}, 0, ledger.ErrSchemaTooNew},
		{"Foreign", Schema{Tables: []string{"users"}}, 0, ledger.ErrNotLedger},
		{"WrongMagic", Schema{HasMeta: true, Magic: "x", Version: "1"}, 0, ledger.ErrNotLedger},
		{"BadVersion", Schema{HasMeta: true, Magic: MagicValue, Version: "one"}, 0, ledger.ErrNotLedger},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Pending(ms, tc.s)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) || len(got) != tc.pending {
				t.Errorf("Pending = %d migrations, %v; want %d, %v", len(got), err, tc.pending, tc.err)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	for _, l := range []map[string]string{nil, {}, {"a": "b", `q"`: "\n\\"}} {
		got, err := DecodeLabels(EncodeLabels(l))
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 && got != nil {
			t.Errorf("labels %v read back as %v, want nil", l, got)
		}
		if len(l) > 0 && !cmp.Equal(l, got) {
			t.Errorf("labels %v read back as %v", l, got)
		}
	}
}

func TestPlanSeries(t *testing.T) {
	minutes := func(from, to int64) Plan { return Plan{Window: Range{from, to}, Minutes: []Range{{from, to}}} }
	hours := func(from, to int64) Plan { return Plan{Window: Range{from, to}, Hours: Range{from, to}} }
	tests := []struct {
		name string
		f    ledger.Filter
		step time.Duration
		want Plan
	}{
		{"Minutes", ledger.Filter{From: at(0, 17), To: at(3, 43)}, time.Minute, minutes(unix(0, 17), unix(3, 43))},
		{"MinutesSecondsTruncated", ledger.Filter{From: at(0, 17).Add(59 * time.Second), To: at(3, 43).Add(time.Second)}, time.Minute, minutes(unix(0, 17), unix(3, 43))},
		{"HoursWidened", ledger.Filter{From: at(0, 17), To: at(3, 43)}, time.Hour, hours(unix(0, 0), unix(4, 0))},
		{"HoursAligned", ledger.Filter{From: at(0, 0), To: at(3, 0)}, time.Hour, hours(unix(0, 0), unix(3, 0))},
		{"HoursEndInsideFirstMinute", ledger.Filter{From: at(0, 0), To: at(3, 0).Add(30 * time.Second)}, time.Hour, hours(unix(0, 0), unix(3, 0))},
		{"HoursInsideOneHour", ledger.Filter{From: at(0, 17), To: at(0, 43)}, time.Hour, hours(unix(0, 0), unix(1, 0))},
		{"Empty", ledger.Filter{From: at(1, 0), To: at(1, 0)}, time.Hour, Plan{}},
		{"EmptyAfterTruncation", ledger.Filter{From: at(1, 0).Add(10 * time.Second), To: at(1, 0).Add(50 * time.Second)}, time.Hour, Plan{}},
		{"Inverted", ledger.Filter{From: at(2, 0), To: at(1, 0)}, time.Minute, Plan{}},
		{"OpenMinutes", ledger.Filter{}, time.Minute, minutes(minUnix, maxUnix)},
		{"OpenHours", ledger.Filter{}, time.Hour, hours(minUnix, maxUnix)},
		{"OpenEndHours", ledger.Filter{From: at(0, 17)}, time.Hour, hours(unix(0, 0), maxUnix)},
		{"FarFuture", ledger.Filter{From: at(0, 17), To: time.Unix(math.MaxInt64, 0)}, time.Hour, hours(unix(0, 0), maxUnix)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanSeries(tc.f, tc.step)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PlanSeries mismatch (-want +got):\n%s", diff)
			}
		})
	}
	for _, step := range []time.Duration{0, time.Second, 2 * time.Minute, 24 * time.Hour} {
		if _, err := PlanSeries(ledger.Filter{}, step); err == nil {
			t.Errorf("PlanSeries(step %v) succeeded, want an error", step)
		}
	}
}

func TestPlanWindowDays(t *testing.T) {
	// t0 is 08:00, so at(16, 0) is midnight.
	day := func(d int) int64 { return unix(16+24*d, 0) }
	tests := []struct {
		name       string
		f          ledger.Filter
		days       int64
		wantDays   Range
		wantHours  []Range
		wantMinute []Range
	}{
		{"DaysHoursMinutes", ledger.Filter{From: at(0, 17), To: at(16+48+3, 43)}, NoHorizon,
			Range{day(0), day(2)}, []Range{{unix(1, 0), day(0)}, {day(2), unix(16+48+3, 0)}},
			[]Range{{unix(0, 17), unix(1, 0)}, {unix(16+48+3, 0), unix(16+48+3, 43)}}},
		{"WholeDays", ledger.Filter{From: at(16, 0), To: at(16+48, 0)}, NoHorizon,
			Range{day(0), day(2)}, nil, nil},
		{"NoWholeDay", ledger.Filter{From: at(0, 0), To: at(20, 0)}, NoHorizon,
			Range{}, []Range{{unix(0, 0), unix(20, 0)}}, nil},
		{"DayHorizon", ledger.Filter{From: at(16, 0), To: at(16+72, 0)}, day(1),
			Range{day(1), day(3)}, []Range{{day(0), day(1)}}, nil},
		{"HorizonInsideADay", ledger.Filter{From: at(16, 0), To: at(16+72, 0)}, day(1) + 3600,
			Range{day(2), day(3)}, []Range{{day(0), day(2)}}, nil},
		{"NoDays", ledger.Filter{From: at(16, 0), To: at(16+72, 0)}, NoDays,
			Range{}, []Range{{day(0), day(3)}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanWindow(tc.f, NoHorizon, tc.days)
			if p.Days != tc.wantDays {
				t.Errorf("Days = %v, want %v", p.Days, tc.wantDays)
			}
			if diff := cmp.Diff(tc.wantHours, p.HourParts()); diff != "" {
				t.Errorf("HourParts mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMinute, p.Minutes); diff != "" {
				t.Errorf("Minutes mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
