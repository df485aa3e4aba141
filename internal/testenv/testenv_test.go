package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// recorder captures what Missing does to a test.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(string, ...any)          { r.failed = true }
func (r *recorder) Skipf(string, ...any)           { r.skipped = true }
func (r *recorder) Logf(format string, a ...any)   {}
func (r *recorder) Errorf(format string, a ...any) {}

func TestMissingFailsUnderCIAndSkipsElsewhere(t *testing.T) {
	for _, tc := range []struct {
		ci            string
		fail, skipped bool
	}{{"true", true, false}, {"", false, true}, {"false", false, true}} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		Missing(r, "no %s", "tmux")
		if r.failed != tc.fail || r.skipped != tc.skipped {
			t.Errorf("CI=%q: failed %v, skipped %v; want %v, %v", tc.ci, r.failed, r.skipped, tc.fail, tc.skipped)
		}
	}
}

// TestNATSServerFindsTheBinary: the variable wins; without it PATH, then
// the Go bin directory; with none, Missing (fail under CI, skip
// elsewhere); a variable naming nothing is Missing too, not a fallback.
func TestNATSServerFindsTheBinary(t *testing.T) {
	dir := t.TempDir()
	mk := func(sub string) string {
		d := filepath.Join(dir, sub)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, "nats-server")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fromEnv, onPath, inGobin := mk("env"), mk("path"), mk("gobin")
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, path, gobin, want string
	}{
		{"variable", fromEnv, filepath.Dir(onPath), filepath.Dir(inGobin), fromEnv},
		{"PATH", "", filepath.Dir(onPath), filepath.Dir(inGobin), onPath},
		{"GOBIN", "", empty, filepath.Dir(inGobin), inGobin},
		{"none", "", empty, empty, ""},
		{"variable naming nothing", filepath.Join(dir, "nope"), filepath.Dir(onPath), filepath.Dir(inGobin), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(NATSServerEnv, tc.env)
			t.Setenv("PATH", tc.path)
			t.Setenv("GOBIN", tc.gobin)
			for _, ci := range []string{"true", ""} {
				t.Setenv("CI", ci)
				r := &recorder{TB: t}
				got := NATSServer(r)
				missing := r.failed || r.skipped
				if got != tc.want || missing != (tc.want == "") || (missing && r.failed != (ci == "true")) {
					t.Errorf("CI=%q: got %q (failed %v, skipped %v), want %q", ci, got, r.failed, r.skipped, tc.want)
				}
			}
		})
	}
}
