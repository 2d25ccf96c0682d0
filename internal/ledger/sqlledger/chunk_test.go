package sqlledger

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// randomHour makes rows of f for one hour: series with random minutes and
// values, large and small, nulls where f has a nullable column.
func randomHour(f *family, r *rand.Rand, hour int64) []minuteRow {
	var rows []minuteRow
	for s := range 1 + r.IntN(20) {
		key := [2]int64{int64(1 + s*3 + r.IntN(3))}
		if len(f.keys) > 1 {
			key[1] = int64(r.IntN(1000))
		}
		for m := range 60 {
			if r.IntN(4) == 0 {
				continue
			}
			row := minuteRow{start: hour + int64(m)*60, key: key}
			for c := range f.cols {
				switch r.IntN(4) {
				case 0:
					row.v[c] = 0
				case 1:
					row.v[c] = 60_000_000
				case 2:
					row.v[c] = r.Int64N(maxFixed)
				default:
					row.v[c] = r.Int64N(1000) - 10
				}
			}
			if f.nullable >= 0 && r.IntN(10) == 0 {
				row.null, row.v[f.nullable] = true, 0
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func TestChunkRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const hour = 1_741_593_600 // a whole hour
	for _, f := range families {
		for range 50 {
			rows := randomHour(f, r, hour)
			data, err := f.encodeChunk(hour, rows)
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.decodeChunk(nil, hour, data)
			if err != nil {
				t.Fatal(err)
			}
			want := f.combine(append([]minuteRow(nil), rows...))
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(minuteRow{})); diff != "" {
				t.Fatalf("%s: decoded rows differ (-want +got):\n%s", f.name, diff)
			}
		}
	}
}

func TestChunkRefusesBadRows(t *testing.T) {
	const hour = 3600
	for _, rows := range [][]minuteRow{
		{{start: hour + 30}},                     // not a whole minute
		{{start: hour + 3600}},                   // the next hour
		{{start: hour - 60}},                     // the hour before
		{{start: hour + 60}, {start: hour + 60}}, // one minute twice
	} {
		if _, err := gpuFamily.encodeChunk(hour, rows); err == nil {
			t.Errorf("encodeChunk(%v) succeeded", rows)
		}
	}
}

func TestChunkMalformed(t *testing.T) {
	good, err := usageFamily.encodeChunk(0, []minuteRow{{start: 60, key: [2]int64{1, 2}, v: [maxCols]int64{5, 6, 7}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"empty":          nil,
		"version":        append([]byte{9}, good[1:]...),
		"not deflated":   {chunkVersion, 0xff, 0xff, 0xff},
		"truncated":      good[:len(good)-2],
		"another family": good, // usage's chunk read as gpu's: columns run out
	} {
		f := usageFamily
		if name == "another family" {
			f = gpuFamily
		}
		_, err := f.decodeChunk(nil, 0, data)
		if !errors.Is(err, errChunk) {
			t.Errorf("%s: err = %v, want errChunk", name, err)
		}
	}
}

func FuzzDecodeChunk(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, fam := range families {
		data, err := fam.encodeChunk(7200, randomHour(fam, r, 7200))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{chunkVersion})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, fam := range families {
			rows, err := fam.decodeChunk(nil, 7200, data)
			if err != nil {
				if !errors.Is(err, errChunk) {
					t.Fatalf("%s: error %v does not wrap errChunk", fam.name, err)
				}
				continue
			}
			// What decodes is an hour's minutes, each (minute, series) once.
			again, err := fam.encodeChunk(7200, rows)
			if err != nil {
				t.Fatalf("%s: decoded rows do not encode: %v", fam.name, err)
			}
			back, err := fam.decodeChunk(nil, 7200, again)
			if err != nil || !cmp.Equal(rows, back, cmp.AllowUnexported(minuteRow{})) {
				t.Fatalf("%s: rows changed through encode and decode (err %v)", fam.name, err)
			}
			for _, row := range rows {
				if row.start < 7200 || row.start >= 7200+3600 || row.start%60 != 0 {
					t.Fatalf("%s: row at %d", fam.name, row.start)
				}
			}
		}
	})
}

// go test -run '^$' -bench Chunk ./internal/ledger/sqlledger/
func BenchmarkChunk(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const hour = 1_741_593_600
	for _, f := range families {
		rows := randomHour(f, r, hour)
		data, err := f.encodeChunk(hour, rows)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f.name+"/encode", func(b *testing.B) {
			for b.Loop() {
				if _, err := f.encodeChunk(hour, rows); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(rows)), "rows")
			b.ReportMetric(float64(len(data))/float64(len(rows)), "bytes/row")
		})
		b.Run(f.name+"/decode", func(b *testing.B) {
			var out []minuteRow
			for b.Loop() {
				if out, err = f.decodeChunk(out[:0], hour, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
