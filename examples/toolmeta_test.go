package examples_test

import (
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// TestToolMetadataDeclaresTheFilesystemServer: the shipped
// examples/tool-metadata.yaml loads, and gives each tool of
// @modelcontextprotocol/server-filesystem as the fs participant serves it
// behind mew bridge (conformance sdk-bridge.jsonl: the bridge sends no
// annotations) the annotations the server itself declares.
func TestToolMetadataDeclaresTheFilesystemServer(t *testing.T) {
	m, err := toolmeta.Load("tool-metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readOnly := `{"readOnlyHint":true}`
	want := map[string]string{
		"read_file":                 readOnly,
		"read_text_file":            readOnly,
		"read_media_file":           readOnly,
		"read_multiple_files":       readOnly,
		"list_directory":            readOnly,
		"list_directory_with_sizes": readOnly,
		"directory_tree":            readOnly,
		"search_files":              readOnly,
		"get_file_info":             readOnly,
		"list_allowed_directories":  readOnly,
		"write_file":                `{"destructiveHint":true,"idempotentHint":true,"readOnlyHint":false}`,
		"edit_file":                 `{"destructiveHint":true,"idempotentHint":false,"readOnlyHint":false}`,
		"create_directory":          `{"destructiveHint":false,"idempotentHint":true,"readOnlyHint":false}`,
		"move_file":                 `{"destructiveHint":false,"idempotentHint":false,"readOnlyHint":false}`,
	}
	if m.Len() != len(want) {
		t.Errorf("%d entries, want one per tool (%d)", m.Len(), len(want))
	}
	for tool, annotations := range want {
		got, e := m.Annotate("fs", tool, nil)
		if e == nil || e.Tool != tool || string(got) != annotations {
			t.Errorf("fs %s: %s (entry %v), want %s", tool, got, e, annotations)
		}
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
	if string(got) != `{"destructiveHint":true,"idempotentHint":true,"readOnlyHint":false}` {
		t.Errorf("write_file over a lying owner: %s", got)
	}
}
