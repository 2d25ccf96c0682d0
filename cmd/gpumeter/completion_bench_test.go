package main

import (
	"strings"
	"testing"
)

// BenchmarkCompleteJobIDs is one tab after `gpumeter cancel `: the
// __complete command asks a real agent (HTTP, a real queue over SQLite)
// who the caller is and for the jobs, and filters 200 of them.
func BenchmarkCompleteJobIDs(b *testing.B) {
	startQueueAgent(b)
	for range 200 {
		if _, _, err := runCmd(b, submitArgs...); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		out, _, err := runCmd(b, "__complete", "cancel", "j-0001")
		if err != nil || strings.Count(out, "\n") != 101 {
			b.Fatalf("__complete cancel j-0001: %v, %d lines, want 100 ids and the directive", err, strings.Count(out, "\n"))
		}
	}
}
