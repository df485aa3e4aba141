//go:build unix

package loadtest

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) the process has used so far;
// 0 where getrusage is not available. Dividing it by the proposals gives
// a cost per proposal that, unlike proposals/s, hardly depends on how many
// cores other programs leave to this one.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
