// Package examples carries the example policies inside the binary, so that
// `fulfiller demo` and `fulfiller bench` run from any directory with nothing
// to set up. The files themselves, in examples/policies, are the ones to
// read and copy.
package examples

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Policies holds examples/policies: the .rego files (with their tests) and
// data.yaml.
//
//go:embed policies/*.rego policies/data.yaml
var Policies embed.FS

// MCP holds examples/mcp: the starter policy of `fulfiller mcp init`
// (policies/, with its tests) and the template of its data (data.yaml).
//
//go:embed mcp/policies/*.rego mcp/data.yaml
var MCP embed.FS

// Write copies the example policies (without their tests) to dir/policies
// and their data beside that directory, as dir/data.yaml: data comes only
// from --data, never from a policy directory. It returns the two paths to
// load, the way an operator would with --policy and --data.
func Write(dir string) (policyDir, dataFile string, err error) {
	policyDir = filepath.Join(dir, "policies")
	if err := os.Mkdir(policyDir, 0o755); err != nil {
		return "", "", fmt.Errorf("write example policies: %w", err)
	}
	err = fs.WalkDir(Policies, "policies", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.rego") {
			return err
		}
		b, err := Policies.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(policyDir, filepath.Base(path))
		if strings.HasSuffix(path, ".yaml") {
			dst = filepath.Join(dir, filepath.Base(path))
			dataFile = dst
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return "", "", fmt.Errorf("write example policies: %w", err)
	}
	return policyDir, dataFile, nil
}
