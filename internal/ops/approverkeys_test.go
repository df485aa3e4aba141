package ops_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/internal/ops"
)

// TestMetricsCountApproverKeysReloadFailures: each refused change to the
// --approver-keys file counts, and the failing gauge holds until a good
// change is in force (the reloads made by hand, as Watch makes them).
func TestMetricsCountApproverKeysReloadFailures(t *testing.T) {
	src := &ops.Source{}
	m := ops.NewMetrics(src)
	if out := scrape(t, m); strings.Contains(out, "fulfiller_approver_keys_") {
		t.Fatalf("approver keys metrics without --approver-keys:\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "keys")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# nobody yet\n")
	w, err := approverkeys.Open(path, approverkeys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src.SetApproverKeys(w)
	want := func(lines ...string) {
		t.Helper()
		out := scrape(t, m)
		for _, l := range lines {
			if !strings.Contains(out, "\n"+l+"\n") {
				t.Errorf("metrics lack %q:\n%s", l, out)
			}
		}
	}
	want("fulfiller_approver_keys_reload_failures_total 0", "fulfiller_approver_keys_reload_failing 0")
	write("alice not-a-key\n")
	if w.Reload() == nil {
		t.Fatal("a broken file reloaded")
	}
	write("alice\n")
	if w.Reload() == nil {
		t.Fatal("a broken file reloaded")
	}
	want("fulfiller_approver_keys_reload_failures_total 2", "fulfiller_approver_keys_reload_failing 1")
	write("# still nobody\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	want("fulfiller_approver_keys_reload_failures_total 2", "fulfiller_approver_keys_reload_failing 0")
}
