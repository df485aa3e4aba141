package mcpserve_test

import (
	"os"
	"testing"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// TestMain runs twice GOMAXPROCS tests at once: most of this package's
// time is spent waiting on deadlines, sweeps and leases of NATS-backed
// instances, each test on a cluster of its own.
func TestMain(m *testing.M) {
	testenv.MoreParallel()
	os.Exit(m.Run())
}
