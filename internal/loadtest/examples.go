package loadtest

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mewkit/fulfiller/examples"
)

// ExamplePolicies returns the policy directory and data file to use when
// the user names none: examples/policies of the working directory when
// bench runs from the repository (so edits there are measured), else the
// copy built into the binary, written under tmp. cleanup removes what was
// written.
func ExamplePolicies(tmp string) (policyDir, dataFile string, cleanup func(), err error) {
	const repoDir = "examples/policies"
	if st, err := os.Stat(filepath.Join(repoDir, "data.yaml")); err == nil && !st.IsDir() {
		return repoDir, filepath.Join(repoDir, "data.yaml"), func() {}, nil
	}
	dir, err := os.MkdirTemp(tmp, "fulfiller-bench-")
	if err != nil {
		return "", "", nil, fmt.Errorf("write example policies: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	if policyDir, dataFile, err = examples.Write(dir); err != nil {
		cleanup()
		return "", "", nil, err
	}
	return policyDir, dataFile, cleanup, nil
}
