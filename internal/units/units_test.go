package units

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string // a part of the error; "" for none
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "100ms", want: 100 * time.Millisecond},
		{in: "0", want: 0},
		{in: "0s", want: 0},
		{in: "0d", want: 0},
		{in: "1d", want: day},
		{in: "7d", want: 7 * day},
		{in: "400d", want: 400 * day},
		{in: "1d12h", want: 36 * time.Hour},
		{in: " 2h ", want: 2 * time.Hour},
		{in: "106751d", want: 106751 * day},
		{in: "", wantErr: `"" is not a duration like 1s, 90s, 1h30m or 7d`},
		{in: "soon", wantErr: `"soon" is not a duration like 1s, 90s, 1h30m or 7d`},
		{in: "7", wantErr: "is not a duration"},
		{in: "d", wantErr: "is not a duration"},
		{in: "x7d", wantErr: "is not a duration"},
		{in: "1.5d", wantErr: "is not a duration"},
		{in: "+1h", wantErr: "is not a duration"},
		{in: "1d+1h", wantErr: "is not a duration"},
		{in: "1d-2h", wantErr: "is not a duration"},
		{in: "1d 12h", wantErr: "is not a duration"},
		{in: "1h1d", wantErr: "is not a duration"},
		{in: "-1h", wantErr: `"-1h" is negative`},
		{in: "-1d", wantErr: `"-1d" is negative`},
		{in: "-", wantErr: "is not a duration"},
		{in: "--1h", wantErr: "is not a duration"},
		{in: "106752d", wantErr: `"106752d" is too long (at most 106751d)`},
		{in: "99999999d", wantErr: "is too long"},
		{in: "106751d23h59m", wantErr: "is too long"},
		{in: "9999999999h", wantErr: "is not a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParseDuration(%q) = %v, want %v", tt.in, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ParseDuration(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			case got != tt.want:
				t.Fatalf("ParseDuration(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{5 * time.Second, "5s"},
		{100 * time.Millisecond, "100ms"},
		{1500 * time.Millisecond, "1.5s"},
		{2 * time.Minute, "2m"},
		{90 * time.Minute, "1h30m"},
		{time.Hour, "1h"},
		{time.Hour + 5*time.Second, "1h0m5s"},
		{36 * time.Hour, "36h"},
		{day, "1d"},
		{35 * day, "35d"},
		{400 * day, "400d"},
		{-5 * time.Minute, "-5m"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in < 0 {
			continue
		}
		if back, err := ParseDuration(tt.want); err != nil || back != tt.in {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.want, back, err, tt.in)
		}
	}
}

func TestFormatAge(t *testing.T) {
	for _, tt := range []struct {
		in   time.Duration
		want string
	}{
		{-time.Second, "0s"}, {0, "0s"}, {2500 * time.Millisecond, "2s"}, {59 * time.Second, "59s"},
		{time.Minute, "1m"}, {90 * time.Minute, "1h"}, {47 * time.Hour, "47h"}, {2 * day, "2d"}, {400 * day, "400d"},
	} {
		if got := FormatAge(tt.in); got != tt.want {
			t.Errorf("FormatAge(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "1024", want: 1024},
		{in: "512B", want: 512},
		{in: "1KiB", want: 1 << 10},
		{in: "3MiB", want: 3 << 20},
		{in: "80GiB", want: 80 << 30},
		{in: "1.5GiB", want: 3 << 29},
		{in: "0.5KiB", want: 512},
		{in: "2 TiB", want: 2 << 40},
		{in: " 64KiB ", want: 64 << 10},
		{in: "16777215TiB", want: 16777215 << 40},
		{in: "18446744073709551615", want: math.MaxUint64},
		{in: "16777216TiB", wantErr: `"16777216TiB" is too large`},
		{in: "18446744073709551616", wantErr: "is too large"},
		{in: "1.5", wantErr: `"1.5" is not a whole number of bytes`},
		{in: "0.1KiB", wantErr: `"0.1KiB" is not a whole number of bytes`},
		{in: "80GB", wantErr: `"80GB": unknown unit "GB"; sizes take B, KiB, MiB, GiB or TiB (powers of 1024)`},
		{in: "80gib", wantErr: `unknown unit "gib"`},
		{in: "80 G", wantErr: `unknown unit "G"`},
		{in: "-1GiB", wantErr: `"-1GiB" is negative`},
		{in: "GiB", wantErr: `"GiB" is not a size like 512MiB or 80GiB`},
		{in: "lots", wantErr: `"lots" is not a size`},
		{in: "1e9", wantErr: "is not a size"},
		{in: "0x10", wantErr: "is not a size"},
		{in: "+1KiB", wantErr: "is not a size"},
		{in: ".5KiB", wantErr: "is not a size"},
		{in: "1.KiB", wantErr: "is not a size"},
		{in: "80  GiB", wantErr: "is not a size"},
		{in: "", wantErr: "is not a size"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParseSize(%q) = %v, want %d", tt.in, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ParseSize(%q) = %d, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			case got != tt.want:
				t.Fatalf("ParseSize(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[uint64]string{0: "0", 1: "1", 1023: "1023", 1 << 10: "1KiB", 1536: "1536", 64 << 10: "64KiB", 80 << 30: "80GiB", 3 << 29: "1536MiB", 2 << 40: "2TiB", math.MaxUint64: "18446744073709551615"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
		if back, err := ParseSize(want); err != nil || back != in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", want, back, err, in)
		}
	}
}

func TestParsePower(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr string
	}{
		{in: "70W", want: 70},
		{in: "70", want: 70},
		{in: "70 W", want: 70},
		{in: "70.5W", want: 70.5},
		{in: "0", want: 0},
		{in: " 700W ", want: 700},
		{in: "1000000W", want: 1e6},
		{in: "1000001W", wantErr: `"1000001W" is too large (at most 1000000W)`},
		{in: "-5W", wantErr: `"-5W" is negative`},
		{in: "-5", wantErr: `"-5" is negative`},
		{in: "70w", wantErr: `"70w": unknown unit "w"; powers are in watts, such as 70W`},
		{in: "0.7kW", wantErr: `unknown unit "kW"`},
		{in: "lots", wantErr: `"lots" is not a power like 70W`},
		{in: "NaN", wantErr: "is not a power"},
		{in: "Inf", wantErr: "is not a power"},
		{in: "7e1W", wantErr: "is not a power"},
		{in: "W", wantErr: "is not a power"},
		{in: "", wantErr: "is not a power"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePower(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParsePower(%q) = %v, want %g", tt.in, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ParsePower(%q) = %g, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			case got != tt.want:
				t.Fatalf("ParsePower(%q) = %g, want %g", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatPower(t *testing.T) {
	for in, want := range map[float64]string{0: "0W", 70: "70W", 70.5: "70.5W", 1e6: "1000000W"} {
		if got := FormatPower(in); got != want {
			t.Errorf("FormatPower(%g) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "2026-11-02", want: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)},
		{in: "2026-11-02T15:04", want: time.Date(2026, 11, 2, 15, 4, 0, 0, time.UTC)},
		{in: "2026-11-02T15:04:05Z", want: time.Date(2026, 11, 2, 15, 4, 5, 0, time.UTC)},
		{in: "2026-11-02T15:04:05.5+02:00", want: time.Date(2026, 11, 2, 13, 4, 5, 5e8, time.UTC)},
		{in: "yesterday", wantErr: `"yesterday" is neither RFC 3339 (2026-11-02T15:04:05Z) nor a date (2026-11-02)`},
		{in: "2026-13-01", wantErr: "is neither RFC 3339"},
		{in: "", wantErr: "is neither RFC 3339"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTime(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParseTime(%q) = %v, want %s", tt.in, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ParseTime(%q) = %s, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			case !got.Equal(tt.want) || got.Location() != time.UTC:
				t.Fatalf("ParseTime(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}
