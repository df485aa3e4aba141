package ops_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// TestToolsShowsDeclaredAndOwnerAnnotations: GET /v1/tools lists what
// policies see of each tool — the annotations with the operator's laid
// over the owner's, the owner's verbatim, and the --tool-metadata entry
// that applied — behind the bearer token like the rest of /v1/.
func TestToolsShowsDeclaredAndOwnerAnnotations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	noop := func(context.Context, json.RawMessage) (string, error) { return "", nil }
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "tool-token"),
		toolserver.Tool{Name: "read_file", Description: "Read a file", Call: noop},
		toolserver.Tool{Name: "write_file", Description: "Write a file", Annotations: map[string]any{"readOnlyHint": true, "title": "Write"}, Call: noop},
	)
	fc := spacetest.Join(t, ctx, srv, "fulfiller", "fulfiller-token")

	path := filepath.Join(t.TempDir(), "tool-metadata.yaml")
	if err := os.WriteFile(path, []byte("fs:\n  \"read_*\": {annotations: {readOnlyHint: true}}\n  write_file: {annotations: {readOnlyHint: false, destructiveHint: true}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	meta, err := toolmeta.Open(path, toolmeta.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Load(ctx, policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := ops.NewHandler(ops.Options{Token: token})
	hs := httptest.NewServer(h)
	defer hs.Close()
	if code, body := do(t, "GET", hs.URL+"/v1/tools", token); code != 503 || compact(t, body) != `{"error":"the fulfiller is not running yet"}` {
		t.Fatalf("before the fulfiller runs: %d %s", code, body)
	}

	ful := fulfill.New(fc, engine, fulfill.Config{ToolMetadata: meta, DiscoverySettle: time.Millisecond})
	sub := fc.Subscribe(agent.SubscribeOptions{All: true, Buffer: 64})
	fulCtx, stopFul := context.WithCancel(context.Background())
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = ful.Run(fulCtx, sub.C()) }()
	defer func() { stopFul(); <-fulDone; sub.Close() }()
	h.SetOperator(ful)
	poll.Until(t, "tool discovery", func() bool { return len(ful.Tools()) == 2 })

	if code, _ := do(t, "GET", hs.URL+"/v1/tools", ""); code != 401 {
		t.Fatalf("without the token: %d", code)
	}
	code, body := do(t, "GET", hs.URL+"/v1/tools", token)
	want := `{"tools":[` +
		`{"annotations":{"readOnlyHint":true},"description":"Read a file","inputSchema":{"type":"object"},` +
		`"metadata":{"file":"` + path + `","line":2,"server":"fs","tool":"read_*"},"name":"read_file","server":"fs"},` +
		`{"annotations":{"destructiveHint":true,"readOnlyHint":false},"description":"Write a file","inputSchema":{"type":"object"},` +
		`"metadata":{"file":"` + path + `","line":3,"server":"fs","tool":"write_file"},"name":"write_file",` +
		`"owner_annotations":{"readOnlyHint":true,"title":"Write"},"server":"fs"}]}`
	if code != 200 || compact(t, body) != want {
		t.Fatalf("GET /v1/tools: %d\n got %s\nwant %s", code, compact(t, body), want)
	}
}
