//go:build linux

package loadtest

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// procCPU is the CPU time (user + system) process pid has used so far,
// from /proc/PID/stat (clock ticks of 10 ms: Linux's USER_HZ is 100);
// false when it cannot be read (the process ended).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, field 2, may hold spaces: count after its ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}
