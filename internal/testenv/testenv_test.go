package testenv

import (
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
