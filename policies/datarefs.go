package policies

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// missingData lists the data documents the compiled modules read that
// neither the data nor the policies themselves provide, as "data.a.b",
// sorted and distinct. Each is the shortest path that is missing: with no
// data at all, every data.settings.* read is reported once as
// data.settings.
//
// A read into the tree of one of the policies' packages is the policies'
// own (a rule, or a package such as fulfiller.suggested that is not there
// yet), never data. A read whose path leaves the data through a
// non-object (an array index, a dynamic key) is taken as provided: only
// the evaluation can tell. References are read from the compiled modules,
// where imports and rule names have been resolved to full data.* refs.
func missingData(modules map[string]*ast.Module, data map[string]any) []string {
	var packages []ast.Ref
	for _, m := range modules {
		packages = append(packages, m.Package.Path)
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range modules {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if !r.HasPrefix(ast.DefaultRootRef) {
				return false
			}
			path := r.ConstantPrefix()
			if len(path) < 2 {
				return false // data[x]: nothing to say statically
			}
			for _, pkg := range packages {
				if path.HasPrefix(pkg) || pkg.HasPrefix(path) {
					return false
				}
			}
			if p := missingPrefix(path, data); p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
			return false
		})
	}
	slices.Sort(out)
	return out
}

// missingPrefix walks data along path (data.a.b…) and returns the path up
// to the first key that is not there, or "" when the walk reaches the end
// or a value that is not an object.
func missingPrefix(path ast.Ref, data map[string]any) string {
	var cur any = data
	parts := []string{"data"}
	for _, t := range path[1:] {
		obj, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		key, ok := t.Value.(ast.String)
		if !ok {
			return "" // a number or other key: not an object's key
		}
		parts = append(parts, refPart(string(key)))
		v, ok := obj[string(key)]
		if !ok {
			return strings.Join(parts, "")
		}
		cur = v
	}
	return ""
}

// refPart writes one key of a path as Rego would: .key, or ["key"] when
// the key is not an identifier.
func refPart(key string) string {
	if ast.IsVarCompatibleString(key) {
		return "." + key
	}
	return `["` + strings.ReplaceAll(key, `"`, `\"`) + `"]`
}
