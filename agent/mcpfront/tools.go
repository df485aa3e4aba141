package mcpfront

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// ListedTool is a tool as an upstream lists it now, for the operator
// (GET /v1/tools): its definition, the digest of that definition and
// the digest pinned for it, which differ while a changed definition
// waits for `fulfiller mcp accept-tools`.
type ListedTool struct {
	Server      string
	Name        string
	Description string
	InputSchema json.RawMessage
	Annotations json.RawMessage
	Digest      string
	Pinned      string
}

// Tools lists the tools every upstream listed last (when it started, on
// its list_changed, or on a client's tools/list), sorted by upstream and
// name, each with the digest pinned for it. An upstream not up yet lists
// none. The pins are read from the store, so it may fail.
func (f *Front) Tools(ctx context.Context) ([]ListedTool, error) {
	var out []ListedTool
	for _, u := range f.ups {
		u.mu.Lock()
		listed := make([]ListedTool, 0, len(u.tools))
		digests := make(map[string]string, len(u.tools))
		for name, def := range u.tools {
			j := u.schemas[name]
			listed = append(listed, ListedTool{Server: u.Name, Name: name, Description: def.Description,
				InputSchema: j.inputSchema, Annotations: j.annotations, Digest: u.digests[name]})
			digests[name] = u.digests[name]
		}
		u.mu.Unlock()
		if len(listed) == 0 {
			continue
		}
		// Listed tools were pinned as they were observed: this reads
		// those pins back.
		pinned, err := f.pins.Pin(ctx, u.Name, digests)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: the tool pins cannot be read: %w", u.Name, err)
		}
		for i := range listed {
			listed[i].Pinned = pinned[listed[i].Name]
		}
		out = append(out, listed...)
	}
	slices.SortFunc(out, func(a, b ListedTool) int { return cmp.Or(cmp.Compare(a.Server, b.Server), cmp.Compare(a.Name, b.Name)) })
	return out, nil
}
