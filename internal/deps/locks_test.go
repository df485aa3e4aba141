package deps

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryMutexIsInTheLockList keeps docs/locks.md complete: every
// sync.Mutex and sync.RWMutex in the module's non-test code (a struct's
// field, a package's variable or a field of its anonymous struct, or a
// function's variable) has a row there, and every row names
// one that exists. A lock order is only worth writing down if nobody can
// add a lock without reading it.
func TestEveryMutexIsInTheLockList(t *testing.T) {
	root := moduleRoot(t)
	listed := lockRows(t, filepath.Join(root, "docs", "locks.md"))
	found := mutexesIn(t, root)
	for _, m := range found {
		if !slices.Contains(listed, m) {
			t.Errorf("%s is not in docs/locks.md: add a row (what it guards), and to its rules if it is held across I/O or under another lock", m)
		}
	}
	for _, m := range listed {
		if !slices.Contains(found, m) {
			t.Errorf("docs/locks.md lists %s, which the source no longer has", m)
		}
	}
	if len(found) < 20 {
		t.Fatalf("found only %d mutexes: the scan is broken", len(found))
	}
}

// moduleRoot is the directory of go.mod, above this package's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return dir
}

// lockRow matches a table row of docs/locks.md: | `pkg` | `Owner.name` | … |
var lockRow = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]+)` \\|")

// lockRows returns the "pkg Owner.name" of every row of the list.
func lockRows(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := lockRow.FindStringSubmatch(sc.Text()); m != nil {
			rows = append(rows, m[1]+" "+m[2])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// mutexesIn returns the "pkg Owner.name" of every mutex declared in the
// non-test Go files under root: Owner is the struct type for a field,
// the function for a variable.
func mutexesIn(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// A mutex's declaration has the identifier Mutex or RWMutex in
		// its text: a file without it has none to parse for (most of
		// them; parsing was most of this test).
		if !bytes.Contains(src, []byte("Mutex")) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		// fields adds the mutexes among a struct's fields, owned by owner.
		fields := func(owner string, st *ast.StructType) {
			for _, fld := range st.Fields.List {
				if !isMutex(fld.Type) {
					continue
				}
				if len(fld.Names) == 0 {
					out = append(out, pkg+" "+owner+".Mutex")
				}
				for _, name := range fld.Names {
					out = append(out, pkg+" "+owner+"."+name.Name)
				}
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if st, ok := spec.Type.(*ast.StructType); ok {
							fields(spec.Name.Name, st)
						}
					case *ast.ValueSpec:
						// A package's variable: a mutex of its own
						// ("pkg name"), or an anonymous struct with
						// mutexes ("pkg name.field").
						for _, name := range spec.Names {
							if isMutex(spec.Type) {
								out = append(out, pkg+" "+name.Name)
							}
							if st, ok := spec.Type.(*ast.StructType); ok {
								fields(name.Name, st)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Body == nil {
					continue
				}
				ast.Inspect(d.Body, func(m ast.Node) bool {
					switch m := m.(type) {
					case *ast.ValueSpec:
						for _, name := range m.Names {
							if isMutex(m.Type) {
								out = append(out, pkg+" "+d.Name.Name+"."+name.Name)
							}
							if st, ok := m.Type.(*ast.StructType); ok {
								fields(d.Name.Name+"."+name.Name, st)
							}
						}
					case *ast.TypeSpec: // a type declared inside the function
						if st, ok := m.Type.(*ast.StructType); ok {
							fields(m.Name.Name, st)
						}
					}
					return true
				})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// isMutex reports whether e is sync.Mutex or sync.RWMutex.
func isMutex(e ast.Expr) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := s.X.(*ast.Ident)
	return ok && x.Name == "sync" && (s.Sel.Name == "Mutex" || s.Sel.Name == "RWMutex")
}
