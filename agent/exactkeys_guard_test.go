package agent_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The packages that read the space decode JSON with agent.Unmarshal:
// encoding/json's Unmarshal matches keys whatever their case, which let a
// chat carry another kind past the gateway and a decoy "Arguments" onto
// an approver's card. Its Decoder may still walk tokens (keys come back
// exactly as written).
func TestTheSpaceIsReadWithExactKeys(t *testing.T) {
	for _, dir := range []string{".", "../fulfill", "../elicit", "../elicit/approver"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			name := ""
			for _, imp := range file.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == "encoding/json" {
					name = "json"
					if imp.Name != nil {
						name = imp.Name.Name
					}
				}
			}
			if name == "" {
				continue
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Unmarshal" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
						t.Errorf("%s: encoding/json's Unmarshal matches keys whatever their case; use agent.Unmarshal", fset.Position(sel.Pos()))
					}
				}
				return true
			})
		}
	}
}
