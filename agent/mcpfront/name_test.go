package mcpfront

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/internal/toolserver"
)

// The only upstream, without a name (fulfiller mcp without --name), is
// named after the serverInfo.name it gives: that is the tool.server its
// calls carry, what its pins and grants are keyed by.
func TestNamelessUpstreamTakesItsServerName(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	files := toolserver.NewFiles(map[string]string{"/repo/a.txt": "hello"})
	up := toolserver.NewMCP(&mcp.Implementation{Name: "secure files/v2", Version: "1.0.0"}, files.Tools()...)
	eng := newFakeEngine(table)
	pins := &MemPins{}
	f, err := New(Config{Engine: eng, Pins: pins}, Upstream{What: "in memory", Transport: func() (mcp.Transport, error) {
		ct, st := mcp.NewInMemoryTransports()
		if _, err := up.Connect(ctx, st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	eng.fx = f
	wg.Add(3)
	go func() { defer wg.Done(); eng.run(ctx) }()
	go func() { defer wg.Done(); _ = f.Run(ctx) }()
	ct, st := mcp.NewInMemoryTransports()
	go func() { defer wg.Done(); _ = f.ServeStdio(ctx, "", st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if _, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/repo/a.txt"}}); err != nil {
		t.Fatal(err)
	}
	if got := eng.seen(); len(got) != 1 || got[0].Server != "secure_files_v2" || got[0].Tool.Server != "secure_files_v2" {
		t.Fatalf("proposals %+v; want one to server secure_files_v2", got)
	}
	pins.mu.Lock()
	_, pinned := pins.m["secure_files_v2"]["read_file"]
	pins.mu.Unlock()
	if !pinned {
		t.Error("read_file is not pinned under secure_files_v2")
	}
	if _, err := New(Config{Engine: eng}, Upstream{Transport: nil}, Upstream{Name: "b"}); err == nil {
		t.Error("two upstreams, one nameless: no error")
	}
}
