package testenv

import (
	"flag"
	"runtime"
	"strconv"
)

// MoreParallel lets twice GOMAXPROCS parallel tests run at once, unless
// -test.parallel was given. A package's TestMain calls it before m.Run
// when its parallel tests mostly wait (on processes they started, on a
// demo's pauses, on leases and deadlines):
// at go test's default of GOMAXPROCS, two of them at a time left the cores
// of a 2-core machine idle while they did (cmd/fulfiller took 184s idle
// for about 140s of CPU). Three and four times as many at once made more
// tests miss their waits on a machine loaded by other work.
func MoreParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0)))
	}
}
