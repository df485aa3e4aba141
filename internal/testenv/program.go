package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// programs holds the main packages Program built in this test process,
// by import path, and the directory they were built into.
var programs struct {
	mu    sync.Mutex
	dir   string
	built map[string]*builtProgram
}

// builtProgram is one main package's build: done once, by the first test
// that asks; the others wait for it and share its outcome.
type builtProgram struct {
	once sync.Once
	path string
	err  error
}

// Program returns the path of an executable built from the main package
// pkg (an import path in this module's build list) with go build, without
// -race: the program as a release builds it, for the tests that start it
// as a process of its own (signals, kill -9, restarts) the way an
// operator does. It is built once per test process, whoever asks first;
// RemovePrograms, from TestMain, deletes the builds.
//
// Not the race-built test binary started as the program: the race
// detector's instrumentation doubles such a process's CPU, and those
// tests are about what the process does from outside (what it answers,
// what it keeps across a crash), while the same code runs race-checked
// in-process in the package's other tests. The dependencies it shares
// with a non-race build elsewhere in the run (.ci/run's memory ceiling
// test) compile once, in the build cache.
func Program(t testing.TB, pkg string) string {
	t.Helper()
	programs.mu.Lock()
	if programs.built == nil {
		programs.built = make(map[string]*builtProgram)
	}
	p := programs.built[pkg]
	if p == nil {
		p = &builtProgram{}
		programs.built[pkg] = p
	}
	programs.mu.Unlock()
	p.once.Do(func() { p.path, p.err = buildProgram(pkg) })
	if p.err != nil {
		t.Fatalf("testenv.Program: %v", p.err)
	}
	return p.path
}

// buildProgram runs go build for pkg into the shared directory, made on
// first use.
func buildProgram(pkg string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build %s: go is not on PATH: %w", pkg, err)
	}
	programs.mu.Lock()
	if programs.dir == "" {
		programs.dir, err = os.MkdirTemp("", "fulfiller-programs-")
	}
	dir := programs.dir
	programs.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	out := filepath.Join(dir, path.Base(pkg))
	cmd := exec.Command(goTool, "build", "-o", out, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	return out, nil
}

// RemovePrograms deletes what Program built in this test process. A
// package's TestMain calls it after m.Run.
func RemovePrograms() {
	programs.mu.Lock()
	defer programs.mu.Unlock()
	if programs.dir != "" {
		_ = os.RemoveAll(programs.dir)
		programs.dir = ""
		programs.built = nil
	}
}
