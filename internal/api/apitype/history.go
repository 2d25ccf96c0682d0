package apitype

import "time"

// Windows of GET /api/v1/gpus/history.
const (
	HistoryHour = "1h"
	HistoryDay  = "24h"
	HistoryWeek = "7d"
)

// HistoryResponse is GET /api/v1/gpus/history: each GPU's figures over
// the window, one point per step that holds readings. The last hour comes
// from the agent's memory, longer windows from the ledger.
type HistoryResponse struct {
	Node   string    `json:"node"`
	Window string    `json:"window"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	// Step is the points' step as "10s", "5m" or "1h", and in seconds.
	Step        string       `json:"step"`
	StepSeconds int64        `json:"step_seconds"`
	GPUs        []GPUHistory `json:"gpus"`
}

// GPUHistory is one GPU's series.
type GPUHistory struct {
	UUID   string         `json:"uuid"`
	Index  int            `json:"index"` // -1 when the ledger never learnt it
	Model  string         `json:"model"`
	Points []HistoryPoint `json:"points"`
}

// HistoryPoint is a GPU's figures over one step starting at T: the mean
// and the maximum of its readings there.
type HistoryPoint struct {
	T         time.Time `json:"t"`
	Samples   int64     `json:"samples"`
	UtilMean  float64   `json:"util_mean"` // SM utilisation, percent
	UtilMax   float64   `json:"util_max"`
	MemMean   float64   `json:"mem_mean"` // memory used, bytes
	MemMax    float64   `json:"mem_max"`
	PowerMean float64   `json:"power_mean"` // watts
	PowerMax  float64   `json:"power_max"`
	TempMean  float64   `json:"temp_mean"` // degrees Celsius
	TempMax   float64   `json:"temp_max"`
}
