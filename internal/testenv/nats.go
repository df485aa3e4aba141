package testenv

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NATSServerEnv names the nats-server binary for tests that run NATS as
// its own process, as an operator does; .ci/run installs the version the
// module embeds and sets it.
const NATSServerEnv = "FULFILLER_TEST_NATS_SERVER_BIN"

// NATSServer returns the path of a nats-server binary: $FULFILLER_TEST_NATS_SERVER_BIN,
// else nats-server on PATH, else in the Go bin directory (where
// `go install github.com/nats-io/nats-server/v2@v2.15.2` puts it). When
// there is none, t is ended by Missing: skipped locally, failed under CI.
// A variable naming a file that is not there is a mistake, never a skip
// to something else.
func NATSServer(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(NATSServerEnv); bin != "" {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
			Missing(t, "%s=%s: no such executable", NATSServerEnv, bin)
			return ""
		}
		return bin
	}
	if bin, err := exec.LookPath("nats-server"); err == nil {
		return bin
	}
	gobin := os.Getenv("GOBIN")
	if gobin == "" {
		gobin = filepath.Join(build.Default.GOPATH, "bin")
	}
	bin := filepath.Join(gobin, "nats-server")
	if fi, err := os.Stat(bin); err == nil && !fi.IsDir() {
		return bin
	}
	Missing(t, "no nats-server: set %s, or go install github.com/nats-io/nats-server/v2@v2.15.2", NATSServerEnv)
	return ""
}
