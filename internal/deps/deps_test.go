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
	"os/exec"
	"slices"
	"strings"
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

// TestDependenciesPointOneWay fails, naming the import chain, when a
// package that approvers or policy authors run depends on OPA or the NATS
// server (or, for the approver's client and the inbox, on the NATS client:
// they speak to the gateway only).
func TestDependenciesPointOneWay(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go command: %v", err)
	}
	for _, c := range []struct {
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
	} {
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
// may start a real sidecar).
func importGraph(t *testing.T, goTool, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", root, err, stderr.Bytes())
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("go list -deps %s: %v", root, err)
	}
	if _, ok := graph[root]; !ok {
		t.Fatalf("go list -deps %s did not list %s itself", root, root)
	}
	return graph
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
