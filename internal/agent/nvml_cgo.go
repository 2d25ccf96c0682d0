//go:build cgo

package agent

import (
	"log/slog"

	"github.com/gpumeter/gpumeter/internal/nvml"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// openNVML loads the NVIDIA driver's library; go-nvml needs cgo.
func openNVML(path string, logger *slog.Logger) (sampler.GPUSource, func() error, error) {
	src, err := nvml.Open(path, logger)
	if err != nil {
		return nil, nil, err
	}
	return src, src.Close, nil
}
