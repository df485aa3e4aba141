//go:build !unix

package loadtest

import "time"

// cpuTime is not measured where getrusage is missing; the report then
// leaves the CPU figures at 0.
func cpuTime() time.Duration { return 0 }
