// Package units is gpumeter's one grammar for durations, sizes, powers and
// times.
// The config file, GPUMETER_* variables, flags, scenario files, CLI windows
// and API parameters all read them here, so a value that one accepts every
// other accepts too, with the same words when it does not.
//
// Durations are Go durations (90s, 1h30m, 100ms) with whole days allowed in
// front (7d, 1d12h); they are never negative. Sizes are whole numbers of
// bytes: plain (1048576), with B, or with KiB, MiB, GiB or TiB (powers of
// 1024); a fraction is allowed when the bytes come out whole (1.5GiB), and
// refused when they do not (0.1KiB). Powers are watts: 70W, 70 W, or a bare
// 70, which means watts too. A space may stand between a number and its
// unit. Times are RFC 3339, to the minute, or plain dates taken as UTC
// midnight. Each Format function writes what its Parse function reads back.
package units

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

const day = 24 * time.Hour

// maxDays bounds the days in front of a duration: time.Duration holds
// about 106751 days.
const maxDays = 106_751

// ParseDuration reads a duration such as 90s, 1h30m, 7d or 1d12h. Days
// are whole and come first; the rest is Go's syntax. A negative duration
// is an error.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	bad := fmt.Errorf("%q is not a duration like 1s, 90s, 1h30m or 7d", s)
	if strings.HasPrefix(t, "-") {
		if _, err := ParseDuration(t[1:]); err == nil {
			return 0, fmt.Errorf("%q is negative", s)
		}
		return 0, bad
	}
	var days time.Duration
	if i := strings.IndexByte(t, 'd'); i >= 0 {
		n, err := strconv.ParseUint(t[:i], 10, 32)
		if err != nil {
			return 0, bad
		}
		if n > maxDays {
			return 0, fmt.Errorf("%q is too long (at most %dd)", s, maxDays)
		}
		days, t = time.Duration(n)*day, t[i+1:]
		if t == "" {
			return days, nil
		}
	}
	if t == "" || t[0] == '+' || t[0] == '-' {
		return 0, bad
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, bad
	}
	if d > math.MaxInt64-days {
		return 0, fmt.Errorf("%q is too long", s)
	}
	return days + d, nil
}

// FormatDuration writes d as a config file would: whole days as days
// (400d, 35d), anything else in Go's syntax without trailing zero units
// (1h30m, 36h, 5s, 100ms).
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String() // 1h30m0s, 2m0s, 1h0m0s, 1.5s
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// FormatAge writes an age as the tables show one, in its largest whole
// unit: 42s, 5m, 30h (up to two days), 3d; a negative age is 0s.
func FormatAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(max(0, int(d/time.Second))) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 2*day:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/day)) + "d"
}

// ParseTime reads RFC 3339 times, times to the minute (2026-11-02T15:04)
// and plain dates (taken as UTC midnight), and gives them in UTC.
func ParseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-11-02T15:04:05Z) nor a date (2026-11-02)", s)
}

// sizeUnits are the units a size may carry, largest first.
var sizeUnits = []struct {
	name string
	mult uint64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}

// ParseSize reads a size in bytes: plain, or with B, KiB, MiB, GiB or TiB
// (powers of 1024). A fraction must come out as whole bytes.
func ParseSize(s string) (uint64, error) {
	num, unit := splitUnit(strings.TrimSpace(s))
	if strings.HasPrefix(num, "-") && isDecimal(num[1:]) {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if !isDecimal(num) {
		return 0, fmt.Errorf("%q is not a size like 512MiB or 80GiB", s)
	}
	mult := uint64(0)
	for _, u := range sizeUnits {
		if u.name == unit {
			mult = u.mult
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q; sizes take B, KiB, MiB, GiB or TiB (powers of 1024)", s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%q is not a size like 512MiB or 80GiB", s)
	}
	r.Mul(r, new(big.Rat).SetUint64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	if !r.Num().IsUint64() {
		return 0, fmt.Errorf("%q is too large (at most 16EiB less one byte)", s)
	}
	return r.Num().Uint64(), nil
}

// FormatSize writes n in the largest unit that keeps it whole, or as
// plain bytes.
func FormatSize(n uint64) string {
	for _, u := range sizeUnits[:4] {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}

// HumanSize writes n for people, in binary units with one decimal above
// a KiB: 512 B, 1.5 KiB, 80.0 GiB (up to TiB), as the command line's
// tables show memory.
func HumanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGT"[exp]) + "iB"
}

// maxPower bounds a power: far above any GPU's, and far from the
// overflow of an energy counter over any duration.
const maxPower = 1e6

// ParsePower reads a power in watts: 70W, 70 W or a bare 70; fractions
// are allowed (70.5W).
func ParsePower(s string) (float64, error) {
	num, unit := splitUnit(strings.TrimSpace(s))
	if strings.HasPrefix(num, "-") && isDecimal(num[1:]) && (unit == "" || unit == "W") {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if !isDecimal(num) {
		return 0, fmt.Errorf("%q is not a power like 70W", s)
	}
	if unit != "" && unit != "W" {
		return 0, fmt.Errorf("%q: unknown unit %q; powers are in watts, such as 70W", s, unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f > maxPower {
		return 0, fmt.Errorf("%q is too large (at most %s)", s, FormatPower(maxPower))
	}
	return f, nil
}

// FormatPower writes w in watts, as ParsePower reads it.
func FormatPower(w float64) string { return strconv.FormatFloat(w, 'f', -1, 64) + "W" }

// splitUnit splits "80 GiB" or "80GiB" into the number and the unit: the
// letters at the end.
func splitUnit(s string) (num, unit string) {
	i := len(s)
	for i > 0 && isLetter(s[i-1]) {
		i--
	}
	return strings.TrimSuffix(s[:i], " "), s[i:]
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isDecimal says whether s is digits with an optional fraction: no sign,
// no exponent, no spaces, nothing YAML or ParseFloat would read besides.
func isDecimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	return whole != "" && allDigits(whole) && (!dot || frac != "" && allDigits(frac))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
