//go:build !linux

package loadtest

import "time"

// procCPU is not measured without /proc: the report's tool server CPU
// is then 0.
func procCPU(int) (time.Duration, bool) { return 0, false }
