// Package examples carries the example policies inside the binary, so that
// `fulfiller demo` and `fulfiller bench` run from any directory with nothing
// to set up. The files themselves, in examples/policies, are the ones to
// read and copy.
package examples

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
	if err := writePolicies(Policies, "policies", policyDir); err != nil {
		return "", "", fmt.Errorf("write example policies: %w", err)
	}
	b, err := Policies.ReadFile("policies/data.yaml")
	if err != nil {
		return "", "", fmt.Errorf("write example policies: %w", err)
	}
	dataFile = filepath.Join(dir, "data.yaml")
	return policyDir, dataFile, os.WriteFile(dataFile, b, 0o644)
}

// WriteMCP writes the starter policy of `fulfiller mcp init` (without its
// tests) to dir/policies and its data (MCPData of roots and home) to
// dir/data.yaml, and returns the two paths to load.
func WriteMCP(dir string, roots []string, home string) (policyDir, dataFile string, err error) {
	policyDir = filepath.Join(dir, "policies")
	if err := writePolicies(MCP, "mcp/policies", policyDir); err != nil {
		return "", "", fmt.Errorf("write the starter policy: %w", err)
	}
	data, err := MCPData(roots, home)
	if err != nil {
		return "", "", err
	}
	dataFile = filepath.Join(dir, "data.yaml")
	return policyDir, dataFile, os.WriteFile(dataFile, data, 0o644)
}

// writePolicies copies the .rego files of root in fsys, without their
// tests, to the new directory policyDir.
func writePolicies(fsys embed.FS, root, policyDir string) error {
	if err := os.Mkdir(policyDir, 0o755); err != nil {
		return err
	}
	return fs.WalkDir(fsys, root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".rego") || strings.HasSuffix(path, "_test.rego") {
			return err
		}
		b, err := fsys.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(policyDir, filepath.Base(path)), b, 0o644)
	})
}

// The lines of the MCP data template that MCPData fills in.
var (
	rootsLine = regexp.MustCompile(`(?m)^workspace_roots: .*$`)
	homeLine  = regexp.MustCompile(`(?m)^home: .*$`)
)

// MCPData is the starter policy's data template (mcp/data.yaml) with the
// working trees and home directory filled in, as JSON (which YAML reads
// as it is: no quoting of a path can go wrong); home "" is null.
func MCPData(roots []string, home string) ([]byte, error) {
	tmpl, err := MCP.ReadFile("mcp/data.yaml")
	if err != nil {
		return nil, err
	}
	if len(rootsLine.FindAll(tmpl, -1)) != 1 || len(homeLine.FindAll(tmpl, -1)) != 1 {
		return nil, errors.New("the embedded data template lost its workspace_roots or home line")
	}
	r, err := json.Marshal(roots)
	if err != nil {
		return nil, err
	}
	h := []byte("null")
	if home != "" {
		if h, err = json.Marshal(home); err != nil {
			return nil, err
		}
	}
	out := rootsLine.ReplaceAllLiteral(tmpl, append([]byte("workspace_roots: "), r...))
	return homeLine.ReplaceAllLiteral(out, append([]byte("home: "), h...)), nil
}
