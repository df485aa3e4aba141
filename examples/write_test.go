package examples_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/examples"
	"github.com/mewkit/fulfiller/policies"
)

// TestWriteGivesWhatAnOperatorLoads: the demo and bench load the embedded
// examples from disk the way an operator would, so the copy must hold the
// policies without their tests, keep the data out of the policy directory
// (data comes only from --data), and load into the policy they are.
func TestWriteGivesWhatAnOperatorLoads(t *testing.T) {
	dir := t.TempDir()
	policyDir, dataFile, err := examples.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dataFile != filepath.Join(dir, "data.yaml") || policyDir != filepath.Join(dir, "policies") {
		t.Fatalf("policyDir %s, dataFile %s", policyDir, dataFile)
	}
	entries, err := os.ReadDir(policyDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if strings.HasSuffix(e.Name(), "_test.rego") || !strings.HasSuffix(e.Name(), ".rego") {
			t.Errorf("policy directory holds %s", e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no policies written")
	}
	engine, err := policies.Load(context.Background(), policies.Options{Policies: []string{policyDir}, Data: []string{dataFile}, Timeout: testPolicyTimeout})
	if err != nil {
		t.Fatalf("the written examples do not load: %v", err)
	}
	if engine.IsDefault() {
		t.Fatal("the built-in deny-all policy was loaded instead of the examples")
	}
	if _, _, err := examples.Write(dir); err == nil {
		t.Error("writing over an existing copy succeeded; want an error, not a mix of two versions")
	}
}

// testPolicyTimeout bounds an evaluation in these tests, which check what
// the example policies decide, not how fast: the product's 100 ms
// default turns a decision into "busy" on a loaded -race machine.
const testPolicyTimeout = time.Minute
