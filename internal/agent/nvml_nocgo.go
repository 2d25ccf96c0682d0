//go:build !cgo

package agent

import (
	"errors"
	"log/slog"

	"github.com/gpumeter/gpumeter/internal/sampler"
)

// openNVML cannot load NVML in a build without cgo; the demo and scenarios
// still work, which is what such a build is for.
func openNVML(string, *slog.Logger) (sampler.GPUSource, func() error, error) {
	return nil, nil, errors.New("this gpumeter was built without cgo (CGO_ENABLED=0), so it cannot load NVML; build it with cgo on a GPU host")
}
