package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// test without the data the policies read says so, as eval and run
// --check do (issue 42): the example policies' tests run without
// data.yaml read data.settings undefined. With the data beside the
// policies it says nothing.
func TestTestWarnsOfMissingData(t *testing.T) {
	parallelCLI(t)
	dir := t.TempDir()
	regos, err := filepath.Glob(filepath.Join(examplePolicies, "*.rego"))
	if err != nil || len(regos) == 0 {
		t.Fatalf("example policies: %v %v", regos, err)
	}
	for _, f := range regos {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, _ := cli(t, "", "test", dir)
	if !strings.Contains(stderr, "the policies read data.settings, which no data file under "+dir+" provides") || !strings.Contains(stderr, "with data.settings as …") {
		t.Errorf("without data.yaml: stderr %q; want the warning naming data.settings", stderr)
	}
	if _, stderr, code := cli(t, "", "test", examplePolicies); code != 0 || stderr != "" {
		t.Errorf("with data.yaml: exit %d, stderr %q; want no warning", code, stderr)
	}
}
