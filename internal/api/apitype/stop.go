package apitype

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/gpumeter/gpumeter/internal/units"
)

// StopRequest is the body of POST /api/v1/containers/{id}/stop.
type StopRequest struct {
	// Timeout is how long Docker waits before it kills the container,
	// as a duration ("30s"); "" means 10s, as docker stop.
	Timeout string `json:"timeout"`
	// Reason is kept in the audit log.
	Reason string `json:"reason"`
}

// StopResponse is the answer to a stop.
type StopResponse struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Stopped bool   `json:"stopped"`
	// Grace is the timeout Docker was given; Seconds is how long the
	// stop took. A stop that took the whole grace found the container
	// still running when it ended, and Docker killed it.
	Grace   string  `json:"grace,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Killed says whether the container outlived the grace period, so that
// Docker sent it SIGKILL: Docker answers as soon as the container has
// exited.
func (r StopResponse) Killed() bool {
	grace, err := time.ParseDuration(r.Grace)
	return err == nil && r.Seconds >= grace.Seconds()
}

// StopMargin is how much longer than its grace a stop's answer may take:
// after the grace Docker kills the container and waits for it to exit.
// The server gives a stop that long, and a client waits as long and more.
const StopMargin = time.Minute

// ParseStop checks a stop request and gives its grace period.
func ParseStop(req StopRequest) (time.Duration, error) {
	grace := 10 * time.Second
	if req.Timeout != "" {
		d, err := units.ParseDuration(req.Timeout)
		if err != nil {
			return 0, fmt.Errorf("timeout: %w", err)
		}
		if d > 10*time.Minute {
			return 0, fmt.Errorf("timeout: %s is longer than 10m", units.FormatDuration(d))
		}
		grace = d
	}
	if n := utf8.RuneCountInString(req.Reason); n > 500 {
		return 0, fmt.Errorf("reason: %d characters, more than 500", n)
	}
	return grace, nil
}
