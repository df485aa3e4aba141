// Package examples carries the example policies inside the binary, so that
// `fulfiller demo` runs from any directory with nothing to set up. The
// files themselves, in examples/policies, are the ones to read and copy.
package examples

import "embed"

// Policies holds examples/policies: the .rego files (with their tests) and
// data.yaml.
//
//go:embed policies/*.rego policies/data.yaml
var Policies embed.FS
