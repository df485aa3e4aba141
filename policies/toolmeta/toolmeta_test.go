package toolmeta_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

func parse(t *testing.T, text string) *toolmeta.Metadata {
	t.Helper()
	m, err := toolmeta.Parse("meta.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// precedence is a file in which several entries match most tools.
const precedence = `fs:
  "read_*": {annotations: {readOnlyHint: true}}        # line 2
  "read_f*": {annotations: {title: longer}}             # line 3
  read_file: {annotations: {title: exact}}              # line 4
  "*_file": {annotations: {title: first of equal}}      # line 5
  "write*": {annotations: {title: second of equal}}     # line 6
  "*": {annotations: {}}                                # line 7
"*":
  write_file: {annotations: {destructiveHint: true}}    # line 9
  "delete_*": {annotations: {destructiveHint: true}}    # line 10
`

// TestLookupPrecedence: the owner's own entries over "*" (even an exact
// name under "*" loses to the owner's catch-all pattern), an exact name
// over a pattern, the longest pattern, then the one written first.
func TestLookupPrecedence(t *testing.T) {
	m := parse(t, precedence)
	for _, c := range []struct {
		server, tool string
		wantLine     int // 0: no entry
	}{
		{"fs", "read_file", 4},   // exact beats the patterns read_f*, read_*, *_file, *
		{"fs", "read_fast", 3},   // read_f* (7) beats read_* (6) and * (1)
		{"fs", "read_text", 2},   // read_* beats *
		{"fs", "write_file", 5},  // *_file and write* are both 6 long: the first written
		{"fs", "write_dir", 6},   // only write* (and *) match
		{"fs", "delete_all", 7},  // fs's own "*" beats "*": delete_*
		{"git", "write_file", 9}, // another owner: the "*" entries
		{"git", "delete_all", 10},
		{"git", "read_file", 0},    // nothing for git's read_file
		{"", "write_file", 0},      // owner unknown: no "*" entry is guessed
		{"fs", "", 0},              // no tool name
		{"*", "write_file", 9},     // a participant literally named "*" is still "*"
		{"fs2", "read_file", 0},    // ids are exact
		{"FS", "write_file", 9},    // and case-sensitive
		{"fs", "READ_FILE", 7},     // so are tool names: only fs's "*" matches
		{"fs", "x", 7},             //
		{"fs", "read_", 2},         // * matches the empty run
		{"fs", "read_\nfile", 2},   // and any character
		{"fs", "read/file", 7},     // including /, which tool names may hold
		{"git", "delete_/x/y", 10}, //
	} {
		e := m.Lookup(c.server, c.tool)
		got := 0
		if e != nil {
			got = e.Line
		}
		if got != c.wantLine {
			t.Errorf("Lookup(%q, %q) = line %d (%v), want line %d", c.server, c.tool, got, e, c.wantLine)
		}
	}
	if m.Len() != 8 {
		t.Errorf("Len %d, want 8", m.Len())
	}
	e := m.Lookup("fs", "read_fast")
	if got, want := e.Ref, (toolmeta.Ref{File: "meta.yaml", Line: 3, Server: "fs", Tool: "read_f*"}); got != want {
		t.Errorf("Ref %+v, want %+v", got, want)
	}
	if got, want := e.Ref.String(), "meta.yaml:3 (fs: read_f*)"; got != want {
		t.Errorf("Ref.String() %q, want %q", got, want)
	}
}

// TestAnnotate: for a declared tool, the operator's annotations alone (the
// owner adds no hint: issue 41, row 3); the owner's text back unchanged
// when no entry applies; nothing when neither says anything.
func TestAnnotate(t *testing.T) {
	m := parse(t, `fs:
  write_file: {annotations: {readOnlyHint: false, destructiveHint: true}}
  wipe: {annotations: {destructiveHint: true}}
  quiet: {annotations: {}}
  titled: {annotations: {title: "Deploy (prod)", openWorldHint: false, idempotentHint: true}}
`)
	for _, c := range []struct {
		name, server, tool, owner string
		want                      string // "" for nil
		entry                     bool
	}{
		{"owner sent none", "fs", "write_file", "", `{"destructiveHint":true,"readOnlyHint":false}`, true},
		{"owner lies", "fs", "write_file", `{"readOnlyHint":true,"title":"Write","x-owner":{"a":[1,2]}}`,
			`{"destructiveHint":true,"readOnlyHint":false}`, true},
		// The red team's case: a hint the operator left out is absent,
		// never the owner's.
		{"owner adds readOnlyHint", "fs", "wipe", `{"readOnlyHint":true}`, `{"destructiveHint":true}`, true},
		{"no entry: verbatim", "fs", "read_file", `{ "readOnlyHint" : true }`, `{ "readOnlyHint" : true }`, false},
		{"no entry, none sent", "fs", "read_file", "", "", false},
		{"empty entry, none sent", "fs", "quiet", "", `{}`, true},
		{"empty entry, owner's dropped", "fs", "quiet", `{"readOnlyHint":true}`, `{}`, true},
		{"owner sent {}", "fs", "quiet", `{}`, `{}`, true},
		{"owner's junk is dropped", "fs", "write_file", `"rw"`, `{"destructiveHint":true,"readOnlyHint":false}`, true},
		{"owner's null", "fs", "write_file", `null`, `{"destructiveHint":true,"readOnlyHint":false}`, true},
		{"every kind of value", "fs", "titled", "", `{"idempotentHint":true,"openWorldHint":false,"title":"Deploy (prod)"}`, true},
		{"unknown owner", "", "write_file", `{"readOnlyHint":true}`, `{"readOnlyHint":true}`, false},
	} {
		var owner json.RawMessage
		if c.owner != "" {
			owner = json.RawMessage(c.owner)
		}
		got, e := m.Annotate(c.server, c.tool, owner)
		if (e != nil) != c.entry {
			t.Errorf("%s: entry %v, want one: %v", c.name, e, c.entry)
		}
		if c.want == "" {
			if got != nil {
				t.Errorf("%s: annotations %s, want absent", c.name, got)
			}
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s: annotations %s, want %s", c.name, got, c.want)
		}
	}
	// Nil metadata (no --tool-metadata) and a nil watcher declare nothing.
	var none *toolmeta.Metadata
	if got, e := none.Annotate("fs", "write_file", json.RawMessage(`{"a":1}`)); string(got) != `{"a":1}` || e != nil {
		t.Errorf("nil metadata: %s %v", got, e)
	}
	var w *toolmeta.Watcher
	if got, e := w.Annotate("fs", "write_file", nil); got != nil || e != nil {
		t.Errorf("nil watcher: %s %v", got, e)
	}
}

// TestJSONFile: JSON is YAML, and errors still have lines.
func TestJSONFile(t *testing.T) {
	m := parse(t, `{
  "fs": {
    "read_*": {"annotations": {"readOnlyHint": true}},
    "write_file": {"annotations": {"destructiveHint": true}}
  }
}`)
	if e := m.Lookup("fs", "write_file"); e == nil || e.Line != 4 || string(e.Annotations) != `{"destructiveHint":true}` {
		t.Fatalf("write_file: %+v", e)
	}
	_, err := toolmeta.Parse("meta.json", []byte(`{
  "fs": {
    "read_*": {"annotations": {"readOnlyHint": "true"}}
  }
}`))
	if want := `meta.json:3: fs: "read_*": annotations: readOnlyHint: want true or false, got the string "true"`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestEmptyFile declares nothing, and is valid: an operator may ship one
// to fill in later.
func TestEmptyFile(t *testing.T) {
	for _, text := range []string{"", "# nothing yet\n", "null\n", "{}\n"} {
		m := parse(t, text)
		if m.Len() != 0 || m.Lookup("fs", "x") != nil {
			t.Errorf("%q declares %d entries", text, m.Len())
		}
	}
}

// TestValidation: every mistake is an error naming file, line and key.
func TestValidation(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"- fs\n", `meta.yaml:1: want a mapping of tool owners (participant ids, or "*") to their tools, got a list`},
		{"fs: [read_file]\n", `meta.yaml:1: fs: want a mapping of tool names or patterns to {annotations: {...}}, got a list`},
		{"fs:\n", `meta.yaml:1: fs: no tools declared; remove the owner or list its tools`},
		{"fs:\n  read_file: {annotation: {readOnlyHint: true}}\n", `meta.yaml:2: fs: read_file: annotation: unknown key (an entry holds annotations)`},
		{"fs:\n  read_file: {}\n", `meta.yaml:2: fs: read_file: no annotations: want {annotations: {...}}`},
		{"fs:\n  read_file: true\n", `meta.yaml:2: fs: read_file: want {annotations: {...}}, got the boolean true`},
		{"fs:\n  read_file:\n    annotations: [readOnlyHint]\n", `meta.yaml:3: fs: read_file: annotations: want a mapping of MCP tool annotations, got a list`},
		{"fs:\n  read_file: {annotations: {readOnlyHint: yes}}\n", `meta.yaml:2: fs: read_file: annotations: readOnlyHint: want true or false, got the string "yes"`},
		{"fs:\n  read_file: {annotations: {destructiveHint: 1}}\n", `meta.yaml:2: fs: read_file: annotations: destructiveHint: want true or false, got the number 1`},
		{"fs:\n  read_file: {annotations: {idempotentHint: }}\n", `meta.yaml:2: fs: read_file: annotations: idempotentHint: want true or false, got nothing (null)`},
		{"fs:\n  read_file: {annotations: {openWorldHint: [true]}}\n", `meta.yaml:2: fs: read_file: annotations: openWorldHint: want true or false, got a list`},
		{"fs:\n  read_file: {annotations: {title: 3}}\n", `meta.yaml:2: fs: read_file: annotations: title: want a string, got the number 3`},
		{"fs:\n  read_file:\n    annotations:\n      readonlyHint: true\n", `meta.yaml:4: fs: read_file: annotations: readonlyHint: unknown annotation (MCP's are title, readOnlyHint, destructiveHint, idempotentHint, openWorldHint)`},
		{"fs:\n  \"read_[\": {annotations: {}}\n", `meta.yaml:2: fs: "read_[": bad glob pattern: syntax error at 6: unexpected end of input`},
		{"fs:\n  \"{a,b\": {annotations: {}}\n", `meta.yaml:2: fs: "{a,b": bad glob pattern: syntax error at 4: unclosed ` + "`{`"},
		{"\"fs-*\":\n  read_file: {annotations: {}}\n", `meta.yaml:1: "fs-*": a tool owner is a participant id, or "*" alone for every owner; glob patterns are for tool names`},
		{"fs:\n  read_file: {annotations: {}}\n  read_file: {annotations: {}}\n", `meta.yaml:3: fs: read_file: duplicate key (first on line 2)`},
		{"fs:\n  a: {annotations: {}}\nfs:\n  b: {annotations: {}}\n", `meta.yaml:3: fs: duplicate key (first on line 1)`},
		{"fs:\n  1: {annotations: {}}\n", `meta.yaml:2: fs: 1: a key must be a string; quote it`},
		{"fs:\n  write_file: {annotations: {}, execution: {taskSupport: optional}}\n", `meta.yaml:2: fs: write_file: execution: declaring execution is not supported: fulfiller would call as a task a tool whose owner never said it can run one`},
		{"fs:\n  <<: {x: {annotations: {}}}\n", `meta.yaml:2: fs: keys must be plain names (no YAML merge keys or complex keys)`},
		{"fs:\n  read_file: {annotations: {readOnlyHint: true}\n", `meta.yaml:1: did not find expected ',' or '}'`},
		{"fs: {}\n---\ngit: {}\n", `meta.yaml:2: more than one YAML document; put every owner in one mapping`},
	} {
		_, err := toolmeta.Parse("meta.yaml", []byte(c.text))
		if err == nil {
			t.Errorf("%q: no error, want %s", c.text, c.want)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("%q:\n got %s\nwant %s", c.text, err, c.want)
		}
		var te *toolmeta.Error
		if !errors.As(err, &te) || te.File != "meta.yaml" {
			t.Errorf("%q: %T is not a *toolmeta.Error naming the file", c.text, err)
		}
	}
	_, err := toolmeta.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.HasSuffix(err.Error(), "missing.yaml: no such file or directory") {
		t.Errorf("missing file: %v", err)
	}
}

// TestWatchReloads: a good change is in force at once; a broken one is
// refused, logged, and the last good metadata stays; fixing it takes.
func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tool-metadata.yaml")
	write := func(text string) {
		t.Helper()
		// As editors and ConfigMaps do: a new file renamed over the old.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("fs:\n  write_file: {annotations: {destructiveHint: true}}\n")
	reloads := make(chan error, 16)
	watching := make(chan struct{})
	var logs syncBuffer
	w, err := toolmeta.Open(path, toolmeta.Options{
		OnReload: func(err error) { reloads <- err },
		Watching: func() { close(watching) },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-watching
	annotations := func() string {
		got, _ := w.Annotate("fs", "write_file", nil)
		return string(got)
	}
	// waitReload waits for the reload that settles on what the test
	// wrote last: a burst of events can end in more than one reload.
	waitReload := func(wantErr bool) error {
		t.Helper()
		for {
			select {
			case err := <-reloads:
				if (err != nil) == wantErr {
					return err
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no reload (wantErr %v)", wantErr)
			}
		}
	}
	if got := annotations(); got != `{"destructiveHint":true}` {
		t.Fatalf("at start: %s", got)
	}

	write("fs:\n  write_file: {annotations: {destructiveHint: true, readOnlyHint: false}}\n")
	waitReload(false)
	if got := annotations(); got != `{"destructiveHint":true,"readOnlyHint":false}` {
		t.Fatalf("after a good change: %s", got)
	}

	write("fs:\n  write_file: {annotations: {destructiveHint: maybe}}\n")
	err = waitReload(true)
	if want := `fs: write_file: annotations: destructiveHint: want true or false, got the string "maybe"`; !strings.Contains(err.Error(), want) {
		t.Fatalf("reload error %v, want it to say %s", err, want)
	}
	if got := annotations(); got != `{"destructiveHint":true,"readOnlyHint":false}` {
		t.Fatalf("a broken change was not refused: %s", got)
	}
	if w.LastReloadError() == nil {
		t.Fatal("LastReloadError is nil after a refused change")
	}
	if !strings.Contains(logs.String(), "tool metadata reload failed; the last good metadata stays in force") {
		t.Fatalf("the refused change was not logged:\n%s", logs.String())
	}

	write("fs:\n  write_file: {annotations: {readOnlyHint: false}}\n")
	waitReload(false)
	if got := annotations(); got != `{"readOnlyHint":false}` {
		t.Fatalf("after the fix: %s", got)
	}
	if err := w.LastReloadError(); err != nil {
		t.Fatalf("LastReloadError after the fix: %v", err)
	}
}

// syncBuffer is a log sink safe to read while it is written.
type syncBuffer = logbuf.Buffer
