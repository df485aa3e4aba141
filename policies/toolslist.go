package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ListedTool is one tool as its owner describes it in a tools/list
// result: what the sidecar copies into input.tool for a call of it.
type ListedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	Execution   json.RawMessage `json:"execution,omitempty"`
}

// ToolsList is a tools/list answer read by ParseToolsList.
type ToolsList struct {
	// From is the participant that answered (the envelope's from): the
	// tool owner. Empty when the answer was not an envelope.
	From  string
	Tools []ListedTool
}

// Tool returns the listed tool called name.
func (l *ToolsList) Tool(name string) (ListedTool, bool) {
	for _, t := range l.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return ListedTool{}, false
}

// ParseToolsList reads a tools/list answer in any of the shapes an author
// may paste: the MCP result ({"tools": [...]}), the JSON-RPC response
// holding it ({"jsonrpc": "2.0", "id": 1, "result": {...}}) or the
// mcp/response envelope holding that (as recorded on a MEW gateway). Tools
// without a name are skipped, as the sidecar skips them; an error response
// or any other JSON is an error, not an empty list, so that a mistaken file
// cannot quietly leave every tool undescribed.
func ParseToolsList(raw []byte) (*ToolsList, error) {
	var probe struct {
		Kind    string          `json:"kind"`
		From    string          `json:"from"`
		Payload json.RawMessage `json:"payload"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
		Tools   json.RawMessage `json:"tools"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&probe); err != nil {
		return nil, fmt.Errorf("not a tools/list answer: %w", err)
	}
	out := &ToolsList{}
	if probe.Kind != "" {
		if probe.Kind != "mcp/response" {
			return nil, fmt.Errorf("an envelope of kind %q, not the mcp/response to a tools/list request", probe.Kind)
		}
		out.From = probe.From
		var rpc struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(probe.Payload, &rpc); err != nil {
			return nil, fmt.Errorf("mcp/response payload: %w", err)
		}
		probe.Result, probe.Error, probe.Tools = rpc.Result, rpc.Error, nil
	}
	if len(probe.Error) > 0 && !bytes.Equal(probe.Error, []byte("null")) {
		return nil, fmt.Errorf("an error response, not a tools/list result: %s", probe.Error)
	}
	if len(probe.Result) > 0 {
		var result struct {
			Tools json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(probe.Result, &result); err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		probe.Tools = result.Tools
	}
	if len(probe.Tools) == 0 || probe.Tools[0] != '[' {
		return nil, errors.New(`no "tools" list: want a tools/list result, its JSON-RPC response or the mcp/response envelope holding it`)
	}
	var tools []ListedTool
	if err := json.Unmarshal(probe.Tools, &tools); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	for _, t := range tools {
		if t.Name != "" {
			out.Tools = append(out.Tools, t)
		}
	}
	return out, nil
}
