//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// asFulfiller, in this test binary's environment, makes TestMain run
// fulfiller's main instead of the tests. The tests whose fulfiller starts
// another fulfiller from its own executable (bench's child, an MCP
// upstream that inherits the environment) use it; the tests of the
// process from outside run a release-like build instead (fulfillerBinary).
const asFulfiller = "FULFILLER_TEST_RUN_AS_FULFILLER"

// fulfillerScript is the program the binary tests run as fulfiller,
// written once per test process; TestMain removes it.
var fulfillerScript struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// fulfillerPackage is the main package fulfillerBinary builds.
const fulfillerPackage = "github.com/mewkit/fulfiller/cmd/fulfiller"

// TestMain runs fulfiller itself when started as the fulfiller
// (asFulfiller) or as nats-server; otherwise it runs the tests, stops the
// inbox tests' browser (browsertest.Stop), removes the fulfiller script
// and build (testenv.RemovePrograms),
// and fails the run if a test left run's default state directory
// (relative to the working directory: this package's source) behind:
// tests give --state.
func TestMain(m *testing.M) {
	testenv.RunAsNATSServer()
	if os.Getenv(asFulfiller) != "" {
		main()
		return // main exits
	}
	_, err := os.Stat(defaultStateDir)
	existed := err == nil
	testenv.MoreParallel() // the binary tests mostly wait on their processes
	testenv.QuickRaceExits()
	code := m.Run()
	browsertest.Stop()
	if fulfillerScript.dir != "" {
		_ = os.RemoveAll(fulfillerScript.dir)
	}
	testenv.RemovePrograms()
	if _, err := os.Stat(defaultStateDir); err == nil && !existed {
		fmt.Fprintf(os.Stderr, "a test left %s in the package directory: run it with --state or FULFILLER_STATE in a temporary directory\n", defaultStateDir)
		_ = os.RemoveAll(defaultStateDir)
		code = 1
	}
	os.Exit(code)
}

// fulfillerBinary returns the path of a program that runs fulfiller with
// the arguments it is given: a script that execs fulfiller built as a
// release builds it, without -race (testenv.Program), so the process the
// test starts, signals and kills is the fulfiller itself (exec keeps the
// pid). Race-built, as the test binary started as fulfiller, each of
// these hundred processes cost twice the CPU, and CI's longest package
// waited on them; the same code runs race-checked in this package's
// in-process tests. The tests that need it run with -short too: they are
// the operator's view (crash, group, audit, shutdown, the interactive
// demo), not soak runs, and CI runs -short. They run in parallel
// (t.Parallel) where they can: each has its own space, directories and
// ports, and mostly waits on its processes (not TestRunBinaryGrants,
// whose in-process CLI calls set the environment).
func fulfillerBinary(t *testing.T) string {
	t.Helper()
	exe := testenv.Program(t, fulfillerPackage)
	fulfillerScript.once.Do(func() {
		var err error
		if fulfillerScript.dir, err = os.MkdirTemp("", "fulfiller-bin-"); err != nil {
			fulfillerScript.err = err
			return
		}
		path := filepath.Join(fulfillerScript.dir, "fulfiller")
		// A policy evaluation may take a minute (where the test's
		// environment or flags say nothing else), not run's and mcp's
		// 100ms: on a loaded 2-core machine an evaluation took longer,
		// twice, and the call was answered busy, which none of these
		// tests is about.
		script := fmt.Sprintf("#!/bin/sh\n%s=\"${%s:-1m}\" exec '%s' \"$@\"\n", envName("policy-timeout"), envName("policy-timeout"), exe)
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			fulfillerScript.err = fmt.Errorf("write %s: %w", path, err)
			return
		}
		fulfillerScript.path = path
	})
	if fulfillerScript.err != nil {
		t.Fatalf("fulfillerBinary: %v", fulfillerScript.err)
	}
	return fulfillerScript.path
}

// humanWorld is a space in which a fulfiller binary, run with Policy and
// "--approvers alice", escalates every proposal to alice, who is present
// (so the escalation waits) but never answers, and the tool owner fs is
// named by `to` (so no discovery is needed). Tests drive the fulfiller's
// shutdown and operations surface while that proposal waits.
type humanWorld struct {
	Ctx    context.Context
	Space  *space.Server
	Policy string
	t      *testing.T
}

// newHumanWorld starts the space and joins alice and fs. Everything stops
// when the test ends; Ctx bounds the whole test.
func newHumanWorld(t *testing.T) *humanWorld {
	t.Helper()
	srv, policy := newBinarySpace(t, "package fulfiller\n\ndecision := {\"action\": \"escalate\", \"message\": \"a human decides\"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	w := &humanWorld{Ctx: ctx, Space: srv, Policy: policy, t: t}
	w.join("alice", "human-token")
	w.join("fs", "human-token")
	return w
}

// newBinarySpace writes policy to a file and starts a space that knows the
// binary tests' tokens: fulfiller-token (mcp/*), coder-token (propose and
// withdraw) and human-token (answer); both last until the test ends.
func newBinarySpace(t *testing.T, policy string) (*space.Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.rego")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, path
}

// runFulfiller starts the binary as `fulfiller run` in this world: joined
// with fulfiller-token from the environment (never on the command line),
// escalating to alice, logging JSON to the returned buffer. extraEnv and
// extraArgs add to that. The test waits for and stops the process.
func (w *humanWorld) runFulfiller(bin string, extraEnv []string, extraArgs ...string) (*exec.Cmd, *lockedBuffer) {
	w.t.Helper()
	// A generous --policy-timeout: on a loaded CI machine the first
	// evaluation can pass the 100ms default, and a fail-closed reject would
	// leave these tests waiting for a prompt that never comes.
	args := append([]string{"run", "--gateway", w.Space.URL(), "--policy", w.Policy, "--approvers", "alice", "--log-format", "json",
		"--policy-timeout", "1m"}, extraArgs...)
	cmd := exec.CommandContext(w.Ctx, bin, args...)
	// The default --state directory is relative: keep it out of the source.
	cmd.Dir = w.t.TempDir()
	cmd.Env = append(append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token"), extraEnv...)
	// Locked: a test may read the logs while the process writes them.
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	return cmd, stderr
}

// join connects a participant for the rest of the test.
func (w *humanWorld) join(id, token string) *agent.Client {
	w.t.Helper()
	c, err := agent.Dial(w.Ctx, agent.Config{URL: w.Space.URL(), ID: id, Token: token})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
	return c
}

// coder joins the proposer, an SDK-like client that sees every envelope.
func (w *humanWorld) coder() *proposer.Proposer {
	w.t.Helper()
	c := w.join("coder", "coder-token")
	prop := proposer.New(c)
	sub := c.Subscribe(agent.SubscribeOptions{All: true})
	go func() {
		for env := range sub.C() {
			prop.Observe(env)
		}
	}()
	return prop
}
