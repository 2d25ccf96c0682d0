//go:build unix

package spec

import (
	"sync"
	"syscall"
)

// openFilesCeiling is this process's hard RLIMIT_NOFILE, read once; 0
// when it cannot be read or is unlimited.
var openFilesCeiling = sync.OnceValue(func() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Max > MostOpenFiles {
		return 0
	}
	return int(r.Max)
})
