package fulfill_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// toolMetaPolicy decides on annotations alone, and checks on the way that
// input.tool carries exactly what the contract says: the merged
// annotations, and the owner's verbatim (absent when it sent none).
const toolMetaPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not declared read-only"}

# slow: the owner (like a tool behind mew bridge) sends no annotations;
# the operator declared it read-only.
decision := {"action": "fulfill"} if {
	input.tool.annotations == {"readOnlyHint": true}
	not "owner_annotations" in object.keys(input.tool)
} else := {"action": "reject", "reason": "unsafe", "message": "declared destructive"} if {
	# add: the owner claims read-only; the operator says otherwise.
	input.tool.annotations == {"readOnlyHint": false, "destructiveHint": true}
	input.tool.owner_annotations == {"readOnlyHint": true}
} else := {"action": "fulfill", "message": "owner's own hint"} if {
	# multiply: no entry applies; the owner's annotations are both.
	input.tool.annotations == {"readOnlyHint": true}
	input.tool.owner_annotations == {"readOnlyHint": true}
}
`

// TestE2EToolMetadata: a tool whose owner sends no annotations is
// fulfilled on the read-only hint the operator declared; an owner's
// read-only claim is overruled by the operator's annotations alone (and kept verbatim as
// owner_annotations); a tool with no entry sees its owner's annotations;
// one with neither sees none and is default-denied.
func TestE2EToolMetadata(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tool-metadata.yaml")
	if err := os.WriteFile(path, []byte(`calculator:
  slow: {annotations: {readOnlyHint: true}}
  add: {annotations: {readOnlyHint: false, destructiveHint: true}}
"*":
  "s*": {annotations: {destructiveHint: true}}   # calculator's own entries win
`), 0o644); err != nil {
		t.Fatal(err)
	}
	meta, err := toolmeta.Open(path, toolmeta.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, worldOptions{policy: toolMetaPolicy, cfg: fulfill.Config{ToolMetadata: meta}})
	w.gate.open() // slow's decisions are not held here

	slow := w.outcome(w.propose("", `{"method":"tools/call","params":{"name":"slow","arguments":{}}}`))
	if !slow.Fulfilled || string(slow.Result) != `{"content":[{"type":"text","text":"ok"}]}` {
		t.Errorf("slow (no owner annotations, declared read-only): %+v", slow)
	}
	add := w.outcome(w.propose("", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`))
	if !add.Rejected || add.Reason != "unsafe" {
		t.Errorf("add (owner says read-only, operator destructive): %+v", add)
	}
	mul := w.outcome(w.propose("", `{"method":"tools/call","params":{"name":"multiply","arguments":{"a":2,"b":3}}}`))
	if !mul.Fulfilled || string(mul.Result) != `{"content":[{"type":"text","text":"6"}]}` {
		t.Errorf("multiply (no entry): %+v", mul)
	}
	hold := w.outcome(w.propose("", `{"method":"tools/call","params":{"name":"hold","arguments":{}}}`))
	if !hold.Rejected || hold.Reason != "policy" {
		t.Errorf("hold (nothing declared by anyone): %+v", hold)
	}

	// What the operator API shows (GET /v1/tools): both, and the entry.
	views := map[string]fulfill.ToolView{}
	for _, v := range w.ful.ToolViews() {
		views[v.Name] = v
	}
	for _, c := range []struct {
		tool, annotations, owner string
		entry                    *toolmeta.Ref
	}{
		{"slow", `{"readOnlyHint":true}`, "", &toolmeta.Ref{File: path, Line: 2, Server: "calculator", Tool: "slow"}},
		{"add", `{"destructiveHint":true,"readOnlyHint":false}`, `{"readOnlyHint":true}`, &toolmeta.Ref{File: path, Line: 3, Server: "calculator", Tool: "add"}},
		{"multiply", `{"readOnlyHint":true}`, `{"readOnlyHint":true}`, nil},
		{"hold", "", "", nil},
	} {
		v, ok := views[c.tool]
		if !ok {
			t.Errorf("%s is not listed", c.tool)
			continue
		}
		if string(v.Annotations) != c.annotations || string(v.OwnerAnnotations) != c.owner || v.Server != "calculator" {
			t.Errorf("%s: annotations %s, owner_annotations %s, server %s; want %s, %s, calculator", c.tool, v.Annotations, v.OwnerAnnotations, v.Server, c.annotations, c.owner)
		}
		if (v.Metadata == nil) != (c.entry == nil) || (c.entry != nil && *v.Metadata != *c.entry) {
			t.Errorf("%s: entry %+v, want %+v", c.tool, v.Metadata, c.entry)
		}
	}
	b, err := json.Marshal(views["slow"])
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"slow","server":"calculator","description":"Answers at once; its decision is slow","annotations":{"readOnlyHint":true},` +
		`"metadata":{"file":"` + path + `","line":2,"server":"calculator","tool":"slow"},"inputSchema":{"type":"object"}}`; string(b) != want {
		t.Errorf("slow as JSON:\n got %s\nwant %s", b, want)
	}
}
