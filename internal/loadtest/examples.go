package loadtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
	policyDir = filepath.Join(dir, "policies")
	if err := os.Mkdir(policyDir, 0o755); err != nil {
		cleanup()
		return "", "", nil, fmt.Errorf("write example policies: %w", err)
	}
	err = fs.WalkDir(examples.Policies, "policies", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.rego") {
			return err
		}
		b, err := examples.Policies.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(policyDir, filepath.Base(path))
		if strings.HasSuffix(path, ".yaml") {
			// Beside the directory, not in it: data comes only from --data.
			dst = filepath.Join(dir, filepath.Base(path))
			dataFile = dst
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		cleanup()
		return "", "", nil, fmt.Errorf("write example policies: %w", err)
	}
	return policyDir, dataFile, cleanup, nil
}
