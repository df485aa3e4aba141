// Package deps holds the test that keeps the module's dependencies
// pointing one way (docs/design.md "Layout"): the approver's client, the
// inboxes and the offline tools (replay, suggest) are run on approvers' and
// authors' machines and must not link the policy engine (OPA) or the NATS
// server, which only the sidecar needs. The wire names, digests and
// signatures they share with the sidecar live in small leaf packages
// (approval, decision, grants, logrecord, printable) instead, which import
// no other package of the module but leaves.
package deps

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mewkit/fulfiller/internal/testenv"
)

const module = "github.com/mewkit/fulfiller"

// forbidden names a family of packages a package must not depend on.
type forbidden struct {
	what   string // for the failure message
	prefix string // import path prefix
}

var (
	opa        = forbidden{"OPA", "github.com/open-policy-agent/"}
	natsServer = forbidden{"the NATS server", "github.com/nats-io/nats-server/"}
	natsClient = forbidden{"the NATS client", "github.com/nats-io/nats.go"}
)

// pointOneWay are the packages approvers and policy authors run, with
// what each must not depend on.
var pointOneWay = []struct {
	pkg  string
	deny []forbidden
}{
	{"elicit/approver", []forbidden{opa, natsServer, natsClient}},
	{"elicit/inbox", []forbidden{opa, natsServer, natsClient}},
	{"elicit/inbox/teaminbox", []forbidden{opa, natsServer, natsClient}},
	{"policies/replay", []forbidden{opa, natsServer, natsClient}},
	{"policies/suggest", []forbidden{opa, natsServer, natsClient}},
	{"elicit/approval", []forbidden{opa, natsServer, natsClient}},
	{"fulfill/decision", []forbidden{opa, natsServer, natsClient}},
	{"fulfill/grants", []forbidden{opa, natsServer, natsClient}},
	{"fulfill/decisionlog/logrecord", []forbidden{opa, natsServer, natsClient}},
	{"internal/printable", []forbidden{opa, natsServer, natsClient}},
}

// TestDependenciesPointOneWay fails, naming the import chain, when a
// package that approvers or policy authors run depends on OPA or the NATS
// server (or, for the approver's client and the inbox, on the NATS client:
// they speak to the gateway only).
func TestDependenciesPointOneWay(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go command: %v", err)
	}
	for _, c := range pointOneWay {
		t.Run(c.pkg, func(t *testing.T) {
			root := module + "/" + c.pkg
			graph := importGraph(t, goTool, root)
			for _, f := range c.deny {
				if chain := chainTo(graph, root, f.prefix); chain != nil {
					n := 0
					for p := range graph {
						if strings.HasPrefix(p, f.prefix) {
							n++
						}
					}
					t.Errorf("%s depends on %s (%d packages): %s", c.pkg, f.what, n, strings.Join(trim(chain), " -> "))
				}
			}
		})
	}
}

// leaves are the module's leaf packages: the wire and data formats the
// sidecar shares with clients and tools.
var leaves = []string{"elicit/approval", "fulfill/decision", "fulfill/grants", "fulfill/decisionlog/logrecord", "internal/printable"}

// TestLeavesImportOnlyLeaves keeps the leaf packages leaves: one that
// imported, say, elicit or policies would bring the sidecar back into
// every client through it.
func TestLeavesImportOnlyLeaves(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go command: %v", err)
	}
	for _, leaf := range leaves {
		root := module + "/" + leaf
		graph := importGraph(t, goTool, root)
		for p := range graph {
			if p == root || !strings.HasPrefix(p, module+"/") {
				continue
			}
			if !slices.Contains(leaves, strings.TrimPrefix(p, module+"/")) {
				t.Errorf("leaf %s depends on %s: %s", leaf, trim([]string{p})[0], strings.Join(trim(chainTo(graph, root, p)), " -> "))
			}
		}
	}
}

// TestChainNamesTheShortestPath checks the search the test above relies
// on, on a graph where the forbidden package is reached two ways.
func TestChainNamesTheShortestPath(t *testing.T) {
	graph := map[string][]string{
		"a": {"b", "c"},
		"b": {"d"},
		"c": {"x/bad"},
		"d": {"x/bad"},
	}
	if got, want := chainTo(graph, "a", "x/"), []string{"a", "c", "x/bad"}; !slices.Equal(got, want) {
		t.Errorf("chainTo = %v, want %v", got, want)
	}
	if got := chainTo(graph, "b", "y/"); got != nil {
		t.Errorf("chainTo for an absent prefix = %v, want nil", got)
	}
}

// importGraph is the import graph of root and everything it depends on,
// as the go command resolves it for this platform (tests excluded: they
// may start a real sidecar). The graphs of all the roots the tests check
// come from one go list run (sharedGraph): each run loads the module's
// packages again, which was most of this package's test time.
func importGraph(t *testing.T, goTool, root string) map[string][]string {
	t.Helper()
	all, err := sharedGraph()
	if _, ok := all[root]; err != nil || !ok {
		// A root the shared run did not name (or a failed run: its error
		// is this root's to report).
		all, err = listDeps(goTool, root)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all[root]; !ok {
		t.Fatalf("go list -deps %s did not list %s itself", root, root)
	}
	// Only what go list -deps root lists (root and its Deps, implicit
	// ones such as runtime/cgo included): the shared graph also holds the
	// other roots' dependencies, which are not root's.
	graph := map[string][]string{root: all[root].imports}
	for _, p := range all[root].deps {
		graph[p] = all[p].imports
	}
	return graph
}

// listed is one package of a go list -deps run.
type listed struct {
	imports []string // its direct imports
	deps    []string // every package it depends on
}

// checkedRoots are the packages whose dependencies the tests check.
func checkedRoots() []string {
	var roots []string
	for _, c := range pointOneWay {
		roots = append(roots, module+"/"+c.pkg)
	}
	for _, leaf := range leaves {
		roots = append(roots, module+"/"+leaf)
	}
	return roots
}

// sharedGraph is the import graph of every checked root, listed once per
// test binary.
var sharedGraph = sync.OnceValues(func() (map[string]listed, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	return listDeps(goTool, checkedRoots()...)
})

// listDeps runs go list -deps on roots: every package they reach, with
// its imports and dependencies.
func listDeps(goTool string, roots ...string) (map[string]listed, error) {
	cmd := exec.Command(goTool, append([]string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}\t{{join .Deps \" \"}}"}, roots...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w\n%s", strings.Join(roots, " "), err, stderr.Bytes())
	}
	graph := map[string]listed{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		imports, deps, _ := strings.Cut(sc.Text(), "\t")
		f := strings.Fields(imports)
		if len(f) > 0 {
			graph[f[0]] = listed{imports: f[1:], deps: strings.Fields(deps)}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w", strings.Join(roots, " "), err)
	}
	return graph, nil
}

// chainTo is the shortest import chain from root to a package whose path
// starts with prefix, or nil when there is none.
func chainTo(graph map[string][]string, root, prefix string) []string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, prefix) {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range graph[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// trim shortens the module's own packages for reading.
func trim(chain []string) []string {
	out := make([]string, len(chain))
	for i, p := range chain {
		out[i] = strings.TrimPrefix(p, module+"/")
	}
	return out
}

// rooms are the top-level directories of the product brief (docs/design.md
// "Layout"): every package of the module lives in one of them.
var rooms = []string{"cmd", "agent", "policies", "fulfill", "elicit", "examples", "internal", "testdata"}

// TestEveryPackageIsInARoom fails, naming it, for a package outside the
// brief's rooms: a new top-level package is a new room nobody agreed on.
func TestEveryPackageIsInARoom(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go command: %v", err)
	}
	out, err := exec.Command(goTool, "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, pkg := range strings.Fields(string(out)) {
		n++
		rel := strings.TrimPrefix(pkg, module+"/")
		room, _, _ := strings.Cut(rel, "/")
		if rel == pkg || !slices.Contains(rooms, room) {
			t.Errorf("package %s is outside the rooms %v", pkg, rooms)
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d packages; the test reads nothing", n)
	}
}

// TestSharedGraphIsEachRootsOwn checks what the tests above rely on: the
// graph of one root cut from the shared go list run is the one go list
// gives for that root alone, no package more or fewer.
func TestSharedGraphIsEachRootsOwn(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go command: %v", err)
	}
	root := module + "/policies/suggest"
	alone, err := listDeps(goTool, root)
	if err != nil {
		t.Fatal(err)
	}
	cut := importGraph(t, goTool, root)
	all, err := sharedGraph()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) <= len(alone) {
		t.Fatalf("the shared graph has %d packages, %s alone %d: the other roots add none, so this checks nothing", len(all), root, len(alone))
	}
	if len(cut) != len(alone) {
		t.Errorf("%s: %d packages cut from the shared graph, %d listed alone", root, len(cut), len(alone))
	}
	for p, imports := range alone {
		if got, ok := cut[p]; !ok || !slices.Equal(got, imports.imports) {
			t.Errorf("%s: %s imports %v in the shared graph (present %v), %v alone", root, p, got, ok, imports.imports)
		}
	}
}
