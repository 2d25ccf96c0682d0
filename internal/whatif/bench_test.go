package whatif

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// benchHistory is 30 days of 600 holders on one node of 8 GPUs: queue
// jobs of 1, 2 or 4 GPUs and notebooks started by hand, each with a
// measured minute profile, arriving about every 72 minutes.
func benchHistory() *History {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	h := &History{From: from, To: from.Add(30 * 24 * time.Hour), ReplayedFrom: from, GPUs: map[string][]queue.GPU{}, Models: map[string]string{}}
	for i := range 8 {
		u := fmt.Sprintf("GPU-%d", i)
		h.GPUs["n1"] = append(h.GPUs["n1"], queue.GPU{UUID: u, Index: i, MemoryTotal: 80 << 30})
		h.Models[u] = "NVIDIA H100 80GB HBM3"
	}
	seed := uint64(7)
	rnd := func(k int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % k
	}
	for i := range 600 {
		submit := from.Add(time.Duration(i*72+rnd(60)) * time.Minute)
		mins := 30 + rnd(1200)
		gpus := []int{1, 1, 1, 2, 4}[rnd(5)]
		hd := &Holder{ID: fmt.Sprintf("c%03d", i), JobID: fmt.Sprintf("j-%06d", i), Node: "n1", User: fmt.Sprintf("u%d", i%7),
			Submit: submit, Start: submit, RealStart: submit, End: submit.Add(time.Duration(mins) * time.Minute),
			GPUs: gpus, Asked: gpus, TimeLimit: 24 * time.Hour, Model: "NVIDIA H100 80GB HBM3", PeakMemory: uint64(4+rnd(60)) << 30}
		if i%5 == 0 {
			hd.JobID, hd.GPUs, hd.Asked, hd.TimeLimit = "", 1, 1, 0
		}
		hd.Rate = make([]float64, mins)
		for m := range hd.Rate {
			hd.Rate[m] = float64(hd.GPUs) * float64(rnd(100)) / 100
		}
		h.Holders = append(h.Holders, hd)
	}
	return h
}

// BenchmarkReplay replays 30 days of 600 holders once per mode.
func BenchmarkReplay(b *testing.B) {
	h := benchHistory()
	for _, m := range Modes() {
		b.Run(string(m), func(b *testing.B) {
			for b.Loop() {
				if _, err := Run(h, Options{Modes: []Mode{m}, NoSearch: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
