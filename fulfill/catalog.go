package fulfill

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// ToolInfo is one tool as its owner described it in tools/list.
type ToolInfo struct {
	Name        string          `json:"name"`
	Server      string          `json:"server"`
	Description string          `json:"description,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// catalog knows which participant offers which tool. It asks every
// participant for tools/list when it appears (welcome, presence join) and
// when it says its list changed, forgets it when it leaves, and never lets
// a slow or silent participant hold anything up for longer than the
// per-request timeout.
type catalog struct {
	space   Space
	log     *slog.Logger
	timeout time.Duration
	sem     chan struct{} // bounds concurrent tools/list requests

	mu       sync.Mutex
	byServer map[string]map[string]ToolInfo
	gen      map[string]uint64 // drops answers older than the newest request or a leave
	inflight int
	settled  chan struct{} // closed whenever no refresh is in flight
	warned   bool
	// session ends at reset: requests sent on a lost session will never be
	// answered, and waiting out their timeout would hold the slots that
	// the new session's discovery needs.
	session    context.Context
	endSession context.CancelFunc

	wg sync.WaitGroup
}

// maxListPages bounds tools/list pagination against a participant that
// keeps returning cursors.
const maxListPages = 20

func newCatalog(space Space, log *slog.Logger, timeout time.Duration, concurrency int) *catalog {
	settled := make(chan struct{})
	close(settled)
	c := &catalog{
		space:    space,
		log:      log,
		timeout:  timeout,
		sem:      make(chan struct{}, concurrency),
		byServer: map[string]map[string]ToolInfo{},
		gen:      map[string]uint64{},
		settled:  settled,
	}
	c.session, c.endSession = context.WithCancel(context.Background())
	return c
}

// refresh asks id for its tools in the background. The goroutine belongs to
// the catalog and ends when ctx ends; wait waits for all of them.
func (c *catalog) refresh(ctx context.Context, id string) {
	if !c.space.Can(agent.KindRequest, json.RawMessage(`{"method":"tools/list"}`)) {
		c.mu.Lock()
		if !c.warned {
			c.warned = true
			c.log.Warn("tool discovery disabled: our capabilities do not allow mcp/request tools/list")
		}
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	c.gen[id]++
	gen := c.gen[id]
	if c.inflight == 0 {
		c.settled = make(chan struct{})
	}
	c.inflight++
	session := c.session
	c.mu.Unlock()

	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(session, cancel)()
		tools, err := c.list(ctx, id)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen[id] == gen {
			if err != nil {
				c.log.Debug("tools/list failed", "participant", id, "err", err)
			} else {
				c.byServer[id] = tools
				c.log.Debug("tools discovered", "participant", id, "tools", len(tools))
			}
		}
		c.inflight--
		if c.inflight == 0 {
			close(c.settled)
		}
	}()
}

func (c *catalog) list(ctx context.Context, id string) (map[string]ToolInfo, error) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	tools := map[string]ToolInfo{}
	cursor := ""
	for page := 0; page < maxListPages; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		resp, err := c.space.Request(rctx, id, agent.MethodToolsList, params)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("tools/list to %s: %w", id, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("tools/list to %s: %w", id, resp.Error)
		}
		var result struct {
			Tools      []ToolInfo `json:"tools"`
			NextCursor string     `json:"nextCursor"`
		}
		if err := json.Unmarshal(resp.Result, &result); err != nil {
			return nil, fmt.Errorf("tools/list from %s: %w", id, err)
		}
		for _, t := range result.Tools {
			if t.Name == "" {
				continue
			}
			t.Server = id
			tools[t.Name] = t
		}
		if result.NextCursor == "" {
			break
		}
		cursor = result.NextCursor
	}
	return tools, nil
}

// drop forgets a participant that left.
func (c *catalog) drop(id string) {
	c.mu.Lock()
	c.gen[id]++
	delete(c.byServer, id)
	c.mu.Unlock()
}

// reset forgets everything, for a new session whose welcome will refill it.
// Discoveries still running were asked on the lost session: they stop.
func (c *catalog) reset() {
	c.mu.Lock()
	for id := range c.gen {
		c.gen[id]++ // drops what is known, and the answers of discoveries cut short below
	}
	c.byServer = map[string]map[string]ToolInfo{}
	c.endSession()
	c.session, c.endSession = context.WithCancel(context.Background())
	c.mu.Unlock()
}

// owners lists who offers a tool, sorted by participant id.
func (c *catalog) owners(tool string) []ToolInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ToolInfo
	for _, tools := range c.byServer {
		if t, ok := tools[tool]; ok {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}

// tool returns what server says about one of its tools.
func (c *catalog) tool(server, name string) (ToolInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byServer[server][name]
	return t, ok
}

// lookup is owners, but when nobody is known to offer the tool and a
// discovery is still running (a tool server that just joined), it waits for
// discovery to settle, bounded by ctx.
func (c *catalog) lookup(ctx context.Context, tool string) []ToolInfo {
	if owners := c.owners(tool); len(owners) > 0 {
		return owners
	}
	c.mu.Lock()
	settled := c.settled
	c.mu.Unlock()
	select {
	case <-settled:
	case <-ctx.Done():
	}
	return c.owners(tool)
}

// Tools lists every known tool, for the operator API and the demo.
func (c *catalog) all() []ToolInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ToolInfo
	for _, tools := range c.byServer {
		for _, t := range tools {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Server != out[j].Server {
			return out[i].Server < out[j].Server
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (c *catalog) wait() { c.wg.Wait() }
