package fulfill

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
)

// ToolInfo is one tool as its owner described it in tools/list.
type ToolInfo struct {
	Name        string          `json:"name"`
	Server      string          `json:"server"`
	Description string          `json:"description,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Execution is the tool's execution block (MCP 2025-11-25), kept as
	// sent: a malformed one must not cost the owner its other tools.
	Execution json.RawMessage `json:"execution,omitempty"`
}

// Values of a tool's execution.taskSupport (MCP 2025-11-25, "Tool-Level
// Negotiation").
const (
	TaskRequired  = "required"
	TaskOptional  = "optional"
	TaskForbidden = "forbidden"
)

// TaskSupport is the tool's execution.taskSupport: TaskRequired,
// TaskOptional, or TaskForbidden — also when absent or unreadable, which
// MCP says means the tool must not be called as a task.
func (t ToolInfo) TaskSupport() string {
	if len(t.Execution) == 0 {
		// Most tools say nothing of it: decoding nothing made an error
		// (a syntax error's, built in full) for every call to one.
		return TaskForbidden
	}
	var e struct {
		TaskSupport string `json:"taskSupport"`
	}
	if agent.Unmarshal(t.Execution, &e) == nil {
		switch e.TaskSupport {
		case TaskRequired, TaskOptional:
			return e.TaskSupport
		}
	}
	return TaskForbidden
}

// catalog knows which participant offers which tool. It asks every
// participant for tools/list when it appears (welcome, presence join) and
// when it says its list changed, forgets it when it leaves, and never lets
// a slow or silent participant hold anything up for longer than the
// per-request timeout.
//
// The gateway does not authenticate from: anyone holding mcp/response can
// answer our tools/list in the owner's name, and the first answer wins the
// agent's request. So an answer is believed only once discovery has
// settled: the owner answered, and no second, different answer to the same
// request arrived within the settle window after it (the real owner and a
// forger both answer at once, since both see the request the moment it is
// broadcast). Until then the owner's tools, and with them their
// annotations, are not known. Two different answers to one request mean
// one was forged: neither is trusted, the spoof attempt is reported, and
// the owner is asked again (a few times; a forger that answers every time
// leaves its tools unknown, which fails closed). A forgery that comes only
// when the real owner is silent for the whole window cannot be told apart;
// that is the residual risk (docs/operations.md, threat model).
type catalog struct {
	space   Space
	log     *slog.Logger
	timeout time.Duration
	settle  time.Duration // how long after an answer a conflicting one is awaited
	sem     chan struct{} // bounds concurrent tools/list requests
	onSpoof func(server, request string)

	mu       sync.Mutex
	byServer map[string]map[string]ToolInfo
	gen      map[string]uint64 // drops answers older than the newest request or a leave
	// asking counts the discoveries of each participant under way.
	asking map[string]int
	// stops ends the newest discovery of each participant under way:
	// asked again (a join after the welcome that listed it, a list
	// change), the older one's answer would be dropped (gen), so it
	// gives its slot up at once rather than hold it, for a participant
	// that never answers tools/list, until the request's timeout.
	stops    map[string]context.CancelFunc
	inflight int
	settled  chan struct{} // closed whenever no refresh is in flight
	// learnt is closed (and replaced) whenever a server's tools become
	// known, so that a lookup waiting for one tool's owner stops waiting
	// then, not when every other discovery has settled too.
	learnt chan struct{}
	warned bool
	// session ends at reset: requests sent on a lost session will never be
	// answered, and waiting out their timeout would hold the slots that
	// the new session's discovery needs.
	session    context.Context
	endSession context.CancelFunc

	// watches are our recent tools/list requests, by envelope id: the
	// answers each got, to notice two different ones.
	watches *lru.Cache[string, *listWatch]
	// conflicts counts discoveries of a server in a row spoiled by
	// conflicting answers, to stop asking again after maxConflicts.
	conflicts map[string]int

	wg sync.WaitGroup
}

// listWatch is one tools/list request of ours and the answer it got.
type listWatch struct {
	server     string
	rpcID      json.RawMessage // the request's JSON-RPC id: an answer that carries an id must carry this one
	digest     [sha256.Size]byte
	answered   bool
	conflicted bool
	settled    bool // its discovery ended: a conflict now means re-discovering
}

// maxConflicts is how many discoveries in a row of one server may be
// spoiled by conflicting answers before the catalog stops asking (until the
// server joins again or says its list changed).
const maxConflicts = 3

// recentLists bounds the tools/list requests watched for conflicts.
const recentLists = 1024

// maxListPages bounds tools/list pagination against a participant that
// keeps returning cursors.
const maxListPages = 20

func newCatalog(space Space, log *slog.Logger, timeout, settle time.Duration, concurrency int) *catalog {
	settled := make(chan struct{})
	close(settled)
	c := &catalog{
		space:     space,
		log:       log,
		timeout:   timeout,
		settle:    settle,
		sem:       make(chan struct{}, concurrency),
		byServer:  map[string]map[string]ToolInfo{},
		gen:       map[string]uint64{},
		asking:    map[string]int{},
		stops:     map[string]context.CancelFunc{},
		settled:   settled,
		learnt:    make(chan struct{}),
		conflicts: map[string]int{},
		onSpoof:   func(string, string) {},
	}
	c.watches, _ = lru.New[string, *listWatch](recentLists)
	c.session, c.endSession = context.WithCancel(context.Background())
	return c
}

// refresh asks id for its tools in the background. The goroutine belongs to
// the catalog and ends when ctx ends; wait waits for all of them.
func (c *catalog) refresh(ctx context.Context, id string) {
	c.mu.Lock()
	delete(c.conflicts, id) // asked from outside (join, list changed): a fresh start
	c.mu.Unlock()
	c.discover(ctx, id)
}

// discover is refresh without resetting the count of spoiled discoveries.
func (c *catalog) discover(ctx context.Context, id string) {
	if !c.space.Can(agent.KindRequest, json.RawMessage(`{"method":"tools/list"}`)) {
		c.mu.Lock()
		if !c.warned {
			c.warned = true
			c.log.Warn("tool discovery disabled: our capabilities do not allow mcp/request tools/list")
		}
		c.mu.Unlock()
		return
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.gen[id]++
	gen := c.gen[id]
	if stop := c.stops[id]; stop != nil {
		stop()
	}
	c.stops[id] = cancel
	if c.inflight == 0 {
		c.settled = make(chan struct{})
	}
	c.inflight++
	c.asking[id]++
	session := c.session
	c.mu.Unlock()

	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		defer context.AfterFunc(session, cancel)()
		tools, requests, err := c.list(ctx, id)
		if err == nil {
			// Wait for a conflicting answer (see the type's doc).
			t := time.NewTimer(c.settle)
			select {
			case <-t.C:
			case <-ctx.Done():
				err = ctx.Err()
			}
			t.Stop()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		spoiled := false
		for _, r := range requests {
			if w, ok := c.watches.Peek(r); ok {
				w.settled = true
				spoiled = spoiled || w.conflicted
			}
		}
		if c.gen[id] == gen {
			switch {
			case err != nil:
				c.log.Debug("tools/list failed", "participant", id, "err", err)
			case spoiled:
				// Reported when the conflict was seen; trust neither answer.
				delete(c.byServer, id)
				c.retryLocked(parent, id)
			default:
				delete(c.conflicts, id)
				c.byServer[id] = tools
				close(c.learnt)
				c.learnt = make(chan struct{})
				c.log.Debug("tools discovered", "participant", id, "tools", len(tools))
			}
		}
		if c.gen[id] == gen {
			delete(c.stops, id) // the newest ended: nothing to stop
		}
		c.inflight--
		if c.asking[id]--; c.asking[id] <= 0 {
			delete(c.asking, id)
		}
		if c.inflight == 0 {
			close(c.settled)
		}
	}()
}

// retryLocked asks id again after a discovery spoiled by conflicting
// answers, unless too many were spoiled in a row. Called with c.mu held.
func (c *catalog) retryLocked(ctx context.Context, id string) {
	c.conflicts[id]++
	if c.conflicts[id] > maxConflicts {
		c.log.Error("tools/list answers keep conflicting: this participant's tools stay unknown until it joins again or announces a list change",
			"participant", id, "discoveries", c.conflicts[id])
		return
	}
	c.log.Info("asking for the tools again after conflicting answers", "participant", id)
	// The goroutine must not start under c.mu: discover takes it.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.discover(ctx, id)
	}()
}

// observe sees every mcp/response in the space. An answer to one of our
// tools/list requests that differs from an earlier answer to the same
// request means one of them was forged: neither is trusted, and a server
// already believed is forgotten and asked again.
func (c *catalog) observe(ctx context.Context, env agent.Envelope) bool {
	request := env.CorrelationID.First()
	c.mu.Lock()
	w, ok := c.watches.Peek(request)
	if !ok || env.From != w.server {
		// Not ours, or an answer from someone else, which the agent
		// ignores anyway: only answers in the owner's name can mislead.
		c.mu.Unlock()
		return ok
	}
	if _, err := agent.DecodeAnswer(env.Payload, w.rpcID); errors.Is(err, agent.ErrWrongRPCID) {
		// No answer to this request (the agent does not take it either),
		// so it spoils nothing; but only a forger writes it.
		server := w.server
		c.mu.Unlock()
		c.log.Warn("an answer to our tools/list request with another JSON-RPC id; ignored (spoof attempt)",
			"participant", server, "request", request, "envelope", env.ID, "err", err)
		c.onSpoof(server, request)
		return true
	}
	digest := sha256.Sum256(env.Payload)
	switch {
	case !w.answered:
		w.answered, w.digest = true, digest
		c.mu.Unlock()
		return true
	case w.digest == digest || w.conflicted:
		c.mu.Unlock()
		return true // the same answer again, or a conflict already reported
	}
	w.conflicted = true
	server := w.server
	if w.settled {
		c.gen[server]++ // drops a discovery still running for it
		delete(c.byServer, server)
		c.retryLocked(ctx, server)
	}
	c.mu.Unlock()
	c.log.Warn("two different answers to one tools/list request: one was forged (spoof attempt); trusting neither and asking again",
		"participant", server, "request", request, "from", env.From, "envelope", env.ID)
	c.onSpoof(server, request)
	return true
}

// list asks id for its tools, page by page; it also returns the envelope
// ids of the requests it sent, which observe watches.
func (c *catalog) list(ctx context.Context, id string) (tools map[string]ToolInfo, requests []string, err error) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	tools = map[string]ToolInfo{}
	cursor := ""
	for page := 0; page < maxListPages; page++ {
		rpcID := json.RawMessage(strconv.FormatInt(c.space.NextRPCID(), 10))
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		env := agent.Envelope{
			ID:      agent.NewID(c.space.ID()),
			To:      []string{id},
			Kind:    agent.KindRequest,
			Payload: agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", ID: rpcID, Method: agent.MethodToolsList, Params: agent.MustPayload(params)}),
		}
		c.mu.Lock()
		c.watches.Add(env.ID, &listWatch{server: id, rpcID: rpcID})
		c.mu.Unlock()
		requests = append(requests, env.ID)
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		resp, err := c.space.RequestEnvelope(rctx, env)
		cancel()
		if err != nil {
			return nil, requests, fmt.Errorf("tools/list to %s: %w", id, err)
		}
		if resp.Error != nil {
			return nil, requests, fmt.Errorf("tools/list to %s: %w", id, resp.Error)
		}
		var result struct {
			Tools      []ToolInfo `json:"tools"`
			NextCursor string     `json:"nextCursor"`
		}
		if err := agent.Unmarshal(resp.Result, &result); err != nil {
			return nil, requests, fmt.Errorf("tools/list from %s: %w", id, err)
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
	return tools, requests, nil
}

// drop forgets a participant that left.
func (c *catalog) drop(id string) {
	c.mu.Lock()
	c.gen[id]++
	delete(c.byServer, id)
	if stop := c.stops[id]; stop != nil {
		stop() // gone: its answer would be dropped
		delete(c.stops, id)
	}
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
	c.stops = map[string]context.CancelFunc{} // the session's end stops them
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

// askingOf reports whether participant id's tools/list is being asked
// (it joined, or we did, a moment ago) and not known yet.
func (c *catalog) askingOf(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, known := c.byServer[id]
	return c.asking[id] > 0 && !known
}

// waitAsked waits, bounded by ctx, until none of ids is being asked for
// its tools/list any more (each known, or its discovery failed).
func (c *catalog) waitAsked(ctx context.Context, ids []string) {
	for {
		c.mu.Lock()
		busy := slices.ContainsFunc(ids, func(id string) bool {
			_, known := c.byServer[id]
			return c.asking[id] > 0 && !known
		})
		settled, learnt := c.settled, c.learnt
		c.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-settled:
		case <-learnt:
		case <-ctx.Done():
			return
		}
	}
}

// listed reports whether server's tools/list is known (it answered one
// on this session) and, if so, whether it lists tool.
func (c *catalog) listed(server, tool string) (known, listed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tools, known := c.byServer[server]
	_, listed = tools[tool]
	return known, listed
}

// tool returns what server says about one of its tools.
func (c *catalog) tool(server, name string) (ToolInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byServer[server][name]
	return t, ok
}

// lookup is owners, but when nobody is known to offer the tool and a
// discovery is still running (a tool server that just joined), it waits,
// bounded by ctx, until someone is known to offer it or every discovery
// has settled. It does not wait for the rest once an owner is known: after
// a reconnect every participant is asked again, and one that never
// answers tools/list (a person's client) would hold the lookup for the
// whole of ctx, which a loaded machine could then spend before the tool
// server's answer was believed.
func (c *catalog) lookup(ctx context.Context, tool string) []ToolInfo {
	for {
		if owners := c.owners(tool); len(owners) > 0 {
			return owners
		}
		c.mu.Lock()
		settled, learnt := c.settled, c.learnt
		c.mu.Unlock()
		select {
		case <-settled:
			return c.owners(tool)
		case <-learnt:
		case <-ctx.Done():
			return c.owners(tool)
		}
	}
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
