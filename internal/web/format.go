package web

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"time"
)

// funcs are the templates' number formats: every figure the console shows
// carries its unit.
var funcs = template.FuncMap{
	"bytes":   func(v any) string { return FormatBytes(toFloat(v)) },
	"hours":   FormatHours,
	"pct":     FormatPercent,
	"pctp":    func(p *float64) string { return optional(p, FormatPercent) },
	"ratio":   func(r float64) string { return FormatPercent(100 * r) },
	"watts":   func(w float64) string { return trim(w, 0) + " W" },
	"wattsp":  func(p *float64) string { return optional(p, func(w float64) string { return trim(w, 0) + " W" }) },
	"celsius": func(c float64) string { return trim(c, 0) + " °C" },
	"celsp":   func(p *float64) string { return optional(p, func(c float64) string { return trim(c, 0) + " °C" }) },
	"kwh":     func(k float64) string { return trim(k, 3) + " kWh" },
	"money":   FormatMoney,
	"dur":     FormatSeconds,
	"num":     func(v float64) string { return trim(v, 2) },
	"num0":    func(v float64) string { return trim(v, 0) },
	"add":     func(a, b int) int { return a + b },
}

func optional(p *float64, f func(float64) string) string {
	if p == nil {
		return "n/a"
	}
	return f(*p)
}

// trim writes v with at most prec decimals, without trailing zeros.
func trim(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if prec > 0 {
		for s[len(s)-1] == '0' {
			s = s[:len(s)-1]
		}
		if s[len(s)-1] == '.' {
			s = s[:len(s)-1]
		}
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// FormatBytes writes b in binary units: 1.5 GiB.
func FormatBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for math.Abs(b) >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return trim(b, 0) + " B"
	}
	return trim(b, 1) + " " + units[i]
}

// FormatPercent writes p, a percentage, as 42 %.
func FormatPercent(p float64) string { return trim(p, 0) + " %" }

// FormatMoney writes v in currency cur with two decimals.
func FormatMoney(v float64, cur string) string {
	if cur == "" {
		return trim(v, 2)
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + cur
}

// FormatSeconds writes a duration in seconds as 3d 4h, 2h 5m, 4m 10s or
// 12s.
func FormatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < 0:
		return "–"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// toFloat reads the numbers templates are given.
func toFloat(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case *float64:
		if n != nil {
			return *n
		}
	case uint64:
		return float64(n)
	case int64:
		return float64(n)
	case int:
		return float64(n)
	}
	return math.NaN()
}

// FormatHours writes GPU-hours with two decimals, and a small non-zero
// figure with two significant digits, so that a few minutes of use do
// not read as none.
func FormatHours(h float64) string {
	if a := math.Abs(h); a > 0 && a < 0.01 {
		return strconv.FormatFloat(h, 'g', 2, 64) + " h"
	}
	return trim(h, 2) + " h"
}
