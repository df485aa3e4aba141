// Package testenv decides what a test does when the machine lacks
// something it needs (a tool, a device, a permission).
//
// Outside CI the test is skipped with a message that says how to get it.
// Under CI (the environment variable CI is "true", as .ci/run runs), where
// .ci/run installs everything the tests need, the test fails instead: a
// test that CI skipped would be a test nobody runs.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI, where nothing may be missing.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing ends t because something it needs is not there: a failure under
// CI, a skip elsewhere. format and args say what is missing and how to get
// it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI lacks what this test needs (.ci/run must provide it): "+format, args...)
		return
	}
	t.Skipf(format, args...)
}
