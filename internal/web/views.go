package web

import "time"

// Tile is one GPU on the overview: its own figures, which say nothing of
// anyone, and who holds it as the reader may see.
type Tile struct {
	Index       int
	UUID, Model string
	Error       string
	Util        *float64 // percent
	Power       *float64 // watts
	Temp        *float64 // °C
	MemUsed     uint64
	MemTotal    uint64
	// Holders are the names of who holds or uses the GPU; another user's
	// are "another user" for a reader who sees only their own.
	Holders []string
}

// MemPercent is the share of memory in use.
func (t Tile) MemPercent() float64 {
	if t.MemTotal == 0 {
		return 0
	}
	return 100 * float64(t.MemUsed) / float64(t.MemTotal)
}

// Figures are a window's use: what the reader may see of it.
type Figures struct {
	From, To             time.Time
	UsedHours, HeldHours float64
	EnergyKWh            float64
	Cost                 float64
	Currency             string
	// Note says why there are no figures (the ledger is off, a read
	// failed); the figures are then zero.
	Note string
}

// Overview is the page at /.
type Overview struct {
	Frame
	// Sampled is when the agent last sampled; zero before the first.
	Sampled time.Time
	Driver  string
	Tiles   []Tile
	Today   Figures
	// WasteFindings, WastedHours and WasteCost are the live findings the
	// reader may see; WasteNote says why there are none to count.
	WasteFindings int
	WastedHours   float64
	WasteCost     float64
	WasteNote     string
	// Queued and Running count the reader's jobs (everyone's for admins
	// and viewers); QueueNote says why there are none to count.
	Queued, Running int
	QueueNote       string
}
