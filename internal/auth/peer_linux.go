package auth

import (
	"context"
	"net"

	"golang.org/x/sys/unix"
)

// ConnContext marks connections that come over a Unix socket with the
// peer's uid, read from the kernel (SO_PEERCRED), so that it cannot be
// forged. It is an http.Server's ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return ctx
	}
	return WithPeerUID(ctx, int(cred.Uid))
}
