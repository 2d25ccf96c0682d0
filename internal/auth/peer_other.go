//go:build !linux

package auth

import (
	"context"
	"net"
)

// ConnContext does nothing where the peer's uid cannot be read: socket
// callers then need a token like any other.
func ConnContext(ctx context.Context, _ net.Conn) context.Context { return ctx }
