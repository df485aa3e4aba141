package testenv

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSServerEnv names a nats-server binary for tests that run NATS as its
// own process, as an operator does. Unset, the test binary itself serves
// as nats-server (see RunAsNATSServer): the same server code at the
// version the module embeds, with nothing to install or compile again.
const NATSServerEnv = "FULFILLER_TEST_NATS_SERVER_BIN"

// asNATSServer, in a test binary's environment, makes RunAsNATSServer
// run nats-server instead of the tests.
const asNATSServer = "FULFILLER_TEST_RUN_AS_NATS_SERVER"

// ready is set by RunAsNATSServer: only a test binary whose TestMain
// calls it can be started as nats-server (another would run its tests
// again, recursively).
var ready bool

// RunAsNATSServer must be called first in the TestMain of a package whose
// tests call NATSServer. In a test binary started by NATSServer's
// program, it runs nats-server with the command line's flags, exactly as
// nats-server's own main does, and exits; otherwise it returns at once.
func RunAsNATSServer() {
	ready = true
	if os.Getenv(asNATSServer) == "" {
		return
	}
	fs := flag.NewFlagSet("nats-server", flag.ExitOnError)
	opts, err := server.ConfigureOptions(fs, os.Args[1:], server.PrintServerAndExit, fs.Usage, server.PrintTLSHelpAndDie)
	if err != nil {
		server.PrintAndDie("nats-server: " + err.Error())
	}
	s, err := server.NewServer(opts)
	if err != nil {
		server.PrintAndDie("nats-server: " + err.Error())
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		server.PrintAndDie(err.Error())
	}
	s.WaitForShutdown()
	os.Exit(0)
}

// NATSServer returns the path of a program that runs nats-server with the
// arguments it is given: $FULFILLER_TEST_NATS_SERVER_BIN when set (a
// variable naming nothing is Missing, never a fallback to something
// else), otherwise a script that starts this test binary as nats-server.
func NATSServer(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(NATSServerEnv); bin != "" {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
			Missing(t, "%s=%s: no such executable", NATSServerEnv, bin)
			return ""
		}
		return bin
	}
	if !ready {
		t.Fatalf("testenv.NATSServer: the package's TestMain must call testenv.RunAsNATSServer first")
		return ""
	}
	path, err := writeWrapper(t.TempDir())
	if err != nil {
		t.Fatalf("testenv.NATSServer: %v", err)
	}
	return path
}

// writeWrapper writes into dir the script that starts this test binary as
// nats-server.
func writeWrapper(dir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the test binary: %w", err)
	}
	path := filepath.Join(dir, "nats-server")
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec '%s' \"$@\"\n", asNATSServer, exe)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", err
	}
	return path, nil
}
