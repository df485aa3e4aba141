package examples_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/testenv"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// filesystemServer is the server examples/space.yaml runs behind mew
// bridge as the fs participant, at the version it pins.
const filesystemServer = "@modelcontextprotocol/server-filesystem@2026.8.31"

// recordedToolsList is that server's own answer to tools/list (its
// stdout, one JSON-RPC line), recorded by running it directly — not
// behind the bridge, which drops annotations — with an empty allowed
// directory: `npx -y @modelcontextprotocol/server-filesystem@2026.8.31
// ./files`, after initialize. TestRecordedToolsListIsTheServersAnswer
// asks the server again and compares.
const recordedToolsList = "testdata/server-filesystem-tools-list.json"

// listedTool is a tool of a tools/list answer, as far as the metadata
// file is concerned.
type listedTool struct {
	Name        string         `json:"name"`
	Annotations map[string]any `json:"annotations"`
}

// toolsOf reads a tools/list JSON-RPC response.
func toolsOf(t *testing.T, raw []byte) []listedTool {
	t.Helper()
	var resp struct {
		Result struct {
			Tools []listedTool `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil || len(resp.Result.Tools) == 0 {
		t.Fatalf("not a tools/list answer with tools (%v): %.200s", err, raw)
	}
	return resp.Result.Tools
}

// checkMetadataMatches: examples/tool-metadata.yaml declares, for the fs
// participant, every tool the server lists and no other, each with the
// annotations the server itself declares, exactly (a declared tool's
// annotations are the operator's alone: a hint left out would read as
// MCP's default, not as the server's).
func checkMetadataMatches(t *testing.T, tools []listedTool) {
	t.Helper()
	m, err := toolmeta.Load("tool-metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != len(tools) {
		t.Errorf("%d entries, want one per tool the server lists (%d)", m.Len(), len(tools))
	}
	for _, tool := range tools {
		got, e := m.Annotate("fs", tool.Name, nil)
		if e == nil || e.Tool != tool.Name {
			t.Errorf("fs %s: no entry of its own (%v); the server declares %v", tool.Name, e, tool.Annotations)
			continue
		}
		var declared map[string]any
		if err := json.Unmarshal(got, &declared); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(declared, tool.Annotations) {
			t.Errorf("fs %s: examples/tool-metadata.yaml declares %s, the server %v (line %d)", tool.Name, got, tool.Annotations, e.Line)
		}
	}
}

// TestToolMetadataDeclaresTheFilesystemServer: the shipped
// examples/tool-metadata.yaml loads, and gives each tool of the pinned
// filesystem server as the fs participant serves it behind mew bridge
// (conformance sdk-bridge.jsonl: the bridge sends no annotations) the
// annotations the server itself declares in its own tools/list (issue 41,
// row 4: move_file was declared non-destructive, the server marks it
// destructive, and a production move_file needed one approval, not two).
func TestToolMetadataDeclaresTheFilesystemServer(t *testing.T) {
	raw, err := os.ReadFile(recordedToolsList)
	if err != nil {
		t.Fatal(err)
	}
	tools := toolsOf(t, raw)
	checkMetadataMatches(t, tools)

	m, err := toolmeta.Load("tool-metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is declared for tools the server may add later, nor for
	// other owners: MCP's cautious defaults apply to them.
	for _, c := range []struct{ server, tool string }{{"fs", "delete_file"}, {"git", "read_file"}} {
		if got, e := m.Annotate(c.server, c.tool, nil); got != nil || e != nil {
			t.Errorf("%s %s: %s (entry %v), want nothing", c.server, c.tool, got, e)
		}
	}
	// An owner that does send annotations adds nothing to a declared tool's.
	got, _ := m.Annotate("fs", "write_file", json.RawMessage(`{"readOnlyHint":true,"title":"Write File"}`))
	if string(got) != `{"destructiveHint":true,"idempotentHint":true,"openWorldHint":false,"readOnlyHint":false}` {
		t.Errorf("write_file over a lying owner: %s", got)
	}
}

// TestRecordedToolsListIsTheServersAnswer runs the pinned filesystem
// server as examples/space.yaml does (npx -y, stdio) and asks it for
// tools/list: its answer is the recording, tool for tool, and the
// metadata file matches it. It needs npx and the npm registry (or npx's
// cache), so it is not run with -short.
func TestRecordedToolsListIsTheServersAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the filesystem server with npx; not with -short")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		testenv.Missing(t, "npx (Debian's npm package) to run %s", filesystemServer)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npx, "-y", filesystemServer, t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	answer := func(id int, requests ...string) []byte {
		t.Helper()
		for _, r := range requests {
			if _, err := io.WriteString(stdin, r+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		for lines.Scan() {
			var msg struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(lines.Bytes(), &msg) == nil && msg.ID != nil && *msg.ID == id {
				return slices.Clone(lines.Bytes())
			}
		}
		t.Fatalf("the server ended without answering request %d: %v", id, lines.Err())
		return nil
	}
	answer(1, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fulfiller-examples-test","version":"0"}}}`)
	live := toolsOf(t, answer(2, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))

	raw, err := os.ReadFile(recordedToolsList)
	if err != nil {
		t.Fatal(err)
	}
	if recorded := toolsOf(t, raw); !reflect.DeepEqual(live, recorded) {
		t.Errorf("%s's tools/list differs from %s (record it again):\nlive     %v\nrecorded %v", filesystemServer, recordedToolsList, live, recorded)
	}
	checkMetadataMatches(t, live)
}
