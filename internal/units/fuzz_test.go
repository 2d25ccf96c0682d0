package units

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// The fuzz targets hold each parser to its grammar: it never panics, what
// it accepts is in range, and what Format writes reads back the same.
//
//	go test ./internal/units -run '^$' -fuzz FuzzParseDuration -fuzztime 30s

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90s", "1h30m", "7d", "1d12h", "0", "-1h", "106751d", "106752d", "1d-1h", "1.5d", "9999999999h", " 2h ", "µs", "1d0.5s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !strings.Contains(err.Error(), "is ") {
				t.Fatalf("ParseDuration(%q) error %q says nothing about the value", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v, negative", s, d)
		}
		out := FormatDuration(d)
		if back, err := ParseDuration(out); err != nil || back != d {
			t.Fatalf("ParseDuration(FormatDuration(%v) = %q) = %v, %v", d, out, back, err)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "512B", "1.5GiB", "0.1KiB", "80GB", "-1GiB", "18446744073709551615", "16777216TiB", "2 TiB", "1e9", ".5KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		// Plain bytes are the very number written.
		if plain := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "B")); allDigits(plain) {
			want := strings.TrimLeft(plain, "0")
			if want == "" {
				want = "0"
			}
			if got := strconv.FormatUint(n, 10); got != want {
				t.Fatalf("ParseSize(%q) = %s, want %s", s, got, want)
			}
		}
		out := FormatSize(n)
		if back, err := ParseSize(out); err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, out, back, err)
		}
	})
}

func FuzzParsePower(f *testing.F) {
	for _, s := range []string{"70W", "70", "70 W", "70.5W", "-5W", "NaN", "Inf", "7e1W", "1000001", "0.7kW"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParsePower(s)
		if err != nil {
			return
		}
		if w < 0 || w > maxPower || math.IsNaN(w) {
			t.Fatalf("ParsePower(%q) = %g, out of range", s, w)
		}
		out := FormatPower(w)
		if back, err := ParsePower(out); err != nil || back != w {
			t.Fatalf("ParsePower(FormatPower(%g) = %q) = %g, %v", w, out, back, err)
		}
	})
}
