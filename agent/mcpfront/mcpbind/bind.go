// Package mcpbind binds the MCP front end (agent/mcpfront) to fulfiller's
// engine (fulfill, over fulfill/lifecycle): it is the front end's Engine,
// whose events it turns into the core's, and the engine's FrontEnd for
// MCP, whose effects it carries out through the front end's Effects.
//
// It holds no state of any proposal: the core's record is the one
// owner of a proposal's state, and the binding reads it (Loop.Match, on
// the Loop's goroutine) where an event needs it: the upstream's
// response is relayed to the client only when the core still waits for
// it, so the client gets it exactly once, and only if the core took it.
// What the policy input and the approvers' prompts need of a call (its
// upstream, the client's clientInfo and capabilities, the tool's
// definition as listed and whether it changed) travels in the
// proposal's Envelope (see Envelope), which the core keeps.
package mcpbind

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// Loop is what the binding needs of the engine: fulfill.Engine's (and
// lifecycle.Loop's) Post and Match.
type Loop interface {
	Post(ctx context.Context, ev lifecycle.Event) error
	Match(ctx context.Context, fn func(*lifecycle.Core) []lifecycle.Event) error
}

// Options configures a Binding.
type Options struct {
	// Approvers, when set, reaches the approvers other than "@caller"
	// (the team inbox hosted in-process: an approver.Local): their
	// prompts and the prompts' cancellations go to it as a space's
	// envelopes, and their answers come back through ApproverAnswered.
	// Without it only "@caller" can be asked.
	Approvers ApproverChannel
	// Logger logs to stderr ([slog.DiscardHandler]).
	Logger *slog.Logger
}

// ApproverChannel carries envelopes to approvers by id (To), as a
// space would: approver.Local's Send. It fails when none of them can
// be reached.
type ApproverChannel interface {
	Send(ctx context.Context, env agent.Envelope) error
}

// Binding is the MCP front end's Engine over fulfiller's engine, and the
// engine's FrontEnd (Name, Wire, IDs, Input, Tool, Route) over the
// front end's Effects. Make one with New, give it both sides with Bind
// before either runs.
type Binding struct {
	opts Options
	log  *slog.Logger
	loop Loop
	fx   mcpfront.Effects
	ids  ids
	// client is the clientInfo marshalled last (clientJSON).
	client atomic.Pointer[clientJSON]
}

// New makes a Binding.
func New(opts Options) *Binding {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Binding{opts: opts, log: opts.Logger}
}

// Bind gives the binding the engine's loop and the front end's effects
// (the *mcpfront.Front). It is called once, before the engine and the
// front end run: each needs the other, so neither can be given at New.
func (b *Binding) Bind(loop Loop, fx mcpfront.Effects) {
	b.loop, b.fx = loop, fx
}

var _ mcpfront.Engine = (*Binding)(nil)

// Envelope is what the core keeps of a call in Proposal.Envelope: the
// call as the front end read it, enough to rebuild it and to make its
// policy input and prompts again (a record resumed) without asking the
// front end.
type Envelope struct {
	// ID is the proposal's id; RPCID the client's JSON-RPC id.
	ID    string          `json:"id"`
	RPCID json.RawMessage `json:"rpc_id,omitempty"`
	// FrontEnd is "mcp".
	FrontEnd string `json:"front_end"`
	// Server is the upstream's NAME; Proposer the client's id, Client
	// its clientInfo (a claim).
	Server   string               `json:"server"`
	Proposer string               `json:"proposer"`
	Client   mcpfront.ClientInfo  `json:"client"`
	Method   string               `json:"method"`
	Params   json.RawMessage      `json:"params"`
	Tool     Tool                 `json:"tool"`
	Changed  *mcpfront.ToolChange `json:"changed,omitempty"`
	// Elicitation: "@caller" can be asked; Progress: Status reaches
	// the client.
	Elicitation bool `json:"elicitation,omitempty"`
	Progress    bool `json:"progress,omitempty"`
}

// Tool is the tool's definition as the upstream lists it now (empty but
// for Name when it does not list it).
type Tool struct {
	Name        string          `json:"name"`
	Listed      bool            `json:"listed,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	Digest      string          `json:"digest,omitempty"`
}

// envelopeOf is p as the core keeps it.
func envelopeOf(p mcpfront.Proposal) Envelope {
	return Envelope{ID: p.ID, RPCID: p.RPCID, FrontEnd: mcpfront.FrontEnd, Server: p.Server, Proposer: p.Proposer,
		Client: p.Client, Method: p.Method, Params: p.Params,
		Tool: Tool{Name: p.Tool.Name, Listed: p.Tool.Listed, Description: p.Tool.Description, InputSchema: p.Tool.InputSchema,
			Annotations: p.Tool.Annotations, Digest: p.Tool.Digest},
		Changed: p.Tool.Changed, Elicitation: p.Elicitation, Progress: p.Progress}
}

// ReadEnvelope reads a proposal's Envelope back (ok false: it is not an
// MCP front end's). Its slices are shared with other reads of the same
// envelope: read them, never write to them.
func ReadEnvelope(p *lifecycle.Proposal) (Envelope, bool) {
	r, ok := readEnvelope(p)
	return r.Envelope, ok
}

// readEnvelope is ReadEnvelope with the call's name and arguments, read
// once with the envelope.
func readEnvelope(p *lifecycle.Proposal) (readEnv, bool) {
	if len(p.Envelope) == 0 {
		return readEnv{}, false
	}
	if r, ok := envelopes.get(p.Envelope); ok {
		return r, true
	}
	var r readEnv
	if json.Unmarshal(p.Envelope, &r.Envelope) != nil || r.FrontEnd != mcpfront.FrontEnd {
		return readEnv{}, false
	}
	r.name, r.args = toolCall(r.Params)
	envelopes.put(p.Envelope, r)
	return r, true
}

// readEnv is an Envelope read, with its Params' name and arguments.
type readEnv struct {
	Envelope
	name string
	args json.RawMessage
}

// envelopes remembers the envelopes read lately, by their bytes: the
// engine reads a call's envelope three times or more to decide it (its
// policy input, its tool twice), and decoding it was a tenth of what
// fulfiller adds to a relayed call. Keyed by content, it holds nothing
// of a proposal's state: an envelope reads the same whoever asks.
var envelopes = envelopeCache{max: 1024}

// envelopeCache is a bounded memo of envelopes decoded: emptied when
// full, which costs one decoding more per envelope in flight.
type envelopeCache struct {
	max int
	mu  sync.Mutex
	m   map[string]readEnv
}

func (c *envelopeCache) get(raw []byte) (readEnv, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[string(raw)]
	return r, ok
}

func (c *envelopeCache) put(raw []byte, r readEnv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.m == nil:
		c.m = make(map[string]readEnv, c.max)
	case len(c.m) >= c.max:
		// Emptied in place: a new map of max entries each time it
		// filled was a tenth of the bytes an MCP call allocates in
		// the engine (BenchmarkEngineMCPCall).
		clear(c.m)
	}
	c.m[string(raw)] = r
}

// Propose implements mcpfront.Engine: the call becomes a Proposed. It
// names the call's client, upstream and JSON-RPC id for every line of
// the proposal (lifecycle.LogFields), the busy reject before any
// decision included; the core's record keeps them.
func (b *Binding) Propose(ctx context.Context, p mcpfront.Proposal) error {
	e := envelopeOf(p)
	env, err := marshalEnvelope(&e)
	if err != nil {
		return fmt.Errorf("mcpbind: proposal %s: %w", p.ID, err)
	}
	// The engine reads the envelope back to decide the call: it is
	// known already (the same JSON values; their spacing as the front
	// end made them).
	r := readEnv{Envelope: e}
	r.name, r.args = proposedCall(p)
	envelopes.put(env, r)
	return b.loop.Post(ctx, lifecycle.Proposed{ID: p.ID, From: p.Proposer, FrontEnd: mcpfront.FrontEnd,
		Method: p.Method, Tool: p.Tool.Name, Addressee: p.Server, Envelope: env, Params: p.Params, Size: len(env),
		Log: &lifecycle.LogFields{Client: p.Client.Name, Server: p.Server, RPCID: p.RPCID}})
}

// Responded implements mcpfront.Engine. On the Loop's goroutine, the
// response is matched to the core's proposal: only while the core waits
// for that proposal's request is it relayed to the client, and the core
// told (lifecycle.Responded, which ends the proposal fulfilled). A
// response the core does not wait for (the proposal ended: withdrawn,
// timed out, shut down) reaches nobody.
func (b *Binding) Responded(ctx context.Context, r mcpfront.Response) error {
	return b.loop.Match(ctx, func(c *lifecycle.Core) []lifecycle.Event {
		requestID, target, ok := c.Awaited(r.ProposalID)
		if !ok {
			b.log.Debug("mcp response the engine no longer waits for; dropped", "proposal", r.ProposalID)
			return nil
		}
		ev := lifecycle.Responded{RequestID: requestID, From: target, Result: r.Result}
		a := mcpfront.Answer{ProposalID: r.ProposalID, Result: r.Result, Error: r.Error}
		if r.Error != nil {
			raw, err := json.Marshal(r.Error)
			if err != nil {
				raw = json.RawMessage(`{"code":-32603,"message":"the upstream's error cannot be read"}`)
			}
			ev.Result, ev.Error = nil, raw
		}
		// Effects.Answer returns at once (it hands the answer to the
		// held call), as Match asks of what fn does.
		if err := b.fx.Answer(ctx, a); err != nil {
			b.log.Debug("mcp result not relayed: the client is gone", "proposal", r.ProposalID, "err", err)
		}
		return []lifecycle.Event{ev}
	})
}

// Answered implements mcpfront.Engine: the caller's answer becomes the
// core's Answer from "@caller", its payload the JSON-RPC response the
// codec reads (an error one when the prompt failed: the caller's part
// ends, AnswerFailed).
func (b *Binding) Answered(ctx context.Context, a mcpfront.PromptAnswer) error {
	var payload []byte
	var err error
	if a.Err != nil {
		payload, err = json.Marshal(struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}{JSONRPC: "2.0", Error: struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{Code: -32603, Message: a.Err.Error()}})
	} else {
		payload, err = json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			Result  json.RawMessage `json:"result"`
		}{JSONRPC: "2.0", Result: a.Result})
	}
	if err != nil {
		return fmt.Errorf("mcpbind: answer to prompt %s: %w", a.PromptID, err)
	}
	return b.loop.Post(ctx, lifecycle.Answer{PromptID: a.PromptID, From: mcpfront.Caller, Payload: payload})
}

// ApproverAnswered takes an envelope an approver of Options.Approvers
// sent the fulfiller: an answer (mcp/response) to one of its prompts
// becomes the core's Answer from that approver, as a space's answer
// does (the JSON-RPC id it carries, matched and verified by the core:
// an unsigned answer for a keyed approver is a forgery there). Anything
// else an approver's client sends is not for the MCP front end and is
// dropped.
func (b *Binding) ApproverAnswered(ctx context.Context, env agent.Envelope) error {
	cid := env.CorrelationID.First()
	if env.Kind != agent.KindResponse || cid == "" {
		return nil
	}
	a := lifecycle.Answer{PromptID: cid, From: env.From, Payload: env.Payload}
	var head struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(env.Payload, &head) == nil && len(head.ID) > 0 && string(head.ID) != "null" {
		// Rule 12: an id that is no integer matches no prompt.
		a.HasRPCID = true
		n, err := strconv.ParseInt(string(head.ID), 10, 64)
		if err != nil {
			n = -1
		}
		a.RPCID = n
	}
	if err := b.loop.Post(ctx, a); err != nil {
		return fmt.Errorf("mcpbind: answer of %s to prompt %s: %w", env.From, cid, err)
	}
	return nil
}

// Withdrawn implements mcpfront.Engine: a WithdrawnBy from the
// proposal's proposer, read from the core's record (on the Loop's
// goroutine) rather than kept here. A call already sent upstream is
// past a withdrawal for the core (its request is committed), but the
// client that cancelled it or left no longer waits: its cancellation
// goes on to the upstream, as a proxy's would, and the upstream's
// outcome (cancelled) ends the proposal.
func (b *Binding) Withdrawn(ctx context.Context, w mcpfront.Withdrawal) error {
	return b.loop.Match(ctx, func(c *lifecycle.Core) []lifecycle.Event {
		p, ok := c.Get(w.ProposalID)
		if !ok {
			return nil // ended already
		}
		if p.Phase == lifecycle.Fulfilling && p.Request != nil {
			// Returns at once (it ends the request's context), as
			// Match asks.
			b.fx.SendCancel(ctx, mcpfront.Cancel{ProposalID: w.ProposalID, Reason: w.Reason})
		}
		return []lifecycle.Event{lifecycle.WithdrawnBy{ID: w.ProposalID, From: p.From, Reason: w.Reason}}
	})
}

// Name is the front end's name: input.front_end.
func (b *Binding) Name() string { return mcpfront.FrontEnd }

// Wire is the core's effects on MCP peers: the client's answer, the
// upstream's request, the caller's prompts (SendPrompt, for "@caller"
// only), and JSON-RPC ids reserved ahead (lifecycle.IDReserver).
func (b *Binding) Wire() lifecycle.Wire { return wire{b} }

// IDs mints the ids the core puts on the wire.
func (b *Binding) IDs() lifecycle.IDs { return &b.ids }

// Input fills what only the MCP front end knows of a proposal's policy
// input: input.front_end "mcp", input.proposer (the client's id, and
// its clientInfo: a claim). There is no space: input.space is left out.
func (b *Binding) Input(_ context.Context, p *lifecycle.Proposal, in *policies.Input) {
	in.FrontEnd = mcpfront.FrontEnd
	if in.Method == "" {
		in.Method = p.Method
	}
	if in.Proposal == nil {
		in.Proposal = p.Envelope // the call as the front end read it
	}
	in.Proposer = &policies.Participant{ID: p.From}
	if e, ok := ReadEnvelope(p); ok && e.Client.Name != "" {
		in.Proposer.Client = b.clientJSON(e.Client)
	}
}

// clientJSON is ci as JSON (input.proposer.client), nil if it cannot be
// marshalled. A client's calls all carry its one clientInfo: the last
// one marshalled is kept, so that a call does not marshal it again. The
// bytes are shared by the inputs that carry them: read, never written.
func (b *Binding) clientJSON(ci mcpfront.ClientInfo) json.RawMessage {
	if last := b.client.Load(); last != nil && last.info == ci {
		return last.raw
	}
	raw, err := json.Marshal(ci)
	if err != nil {
		return nil
	}
	b.client.Store(&clientJSON{info: ci, raw: raw})
	return raw
}

// clientJSON is a clientInfo and its JSON (Binding.clientJSON).
type clientJSON struct {
	info mcpfront.ClientInfo
	raw  json.RawMessage
}

// Tool is input.tool of p's call with params (the proposal's, or an
// approver's edit; nil: the proposal's): server is the upstream's NAME,
// the rest its definition as the upstream listed it when the call was
// made, Changed when it differs from the one pinned; and the tool's
// input schema, for the approvers' form. The MCP front end never sends a
// call as a task, so no Execution is given.
func (b *Binding) Tool(p *lifecycle.Proposal, target string, params json.RawMessage) (*policies.Tool, json.RawMessage) {
	e, ok := readEnvelope(p)
	if !ok {
		return nil, nil
	}
	if params == nil {
		params = p.Params
	}
	if params == nil {
		params = e.Params
	}
	if target == "" {
		target = e.Server
	}
	name, args := e.name, e.args // the call as proposed, read with its envelope
	if !bytes.Equal(params, e.Params) {
		name, args = toolCall(params) // an approver's edit
	}
	if name == "" {
		name = e.Tool.Name
	}
	t := &policies.Tool{Name: name, Arguments: args, Server: target}
	if name != e.Tool.Name || target != e.Server {
		return t, nil // not the tool listed with the call
	}
	t.Description, t.OwnerAnnotations, t.Annotations = e.Tool.Description, e.Tool.Annotations, e.Tool.Annotations
	if e.Changed != nil {
		t.Changed, t.Digest, t.PinnedDigest = true, e.Changed.New, e.Changed.Old
	}
	return t, e.Tool.InputSchema
}

// proposedCall is the name and arguments of p's call as toolCall reads
// them from p.Params, which the front end made of the name and arguments
// it parsed (p.Tool's, json.Marshal'd): p.Tool's own when marshalling
// left the arguments' bytes as they are (no space to drop, nothing to
// escape), so that the params are not parsed again; else toolCall's.
func proposedCall(p mcpfront.Proposal) (string, json.RawMessage) {
	if p.Tool.Name == "" || !marshalsAsIs(p.Tool.Arguments) {
		return toolCall(p.Params)
	}
	if len(p.Tool.Arguments) == 0 {
		return p.Tool.Name, nil // left out of the params (omitempty)
	}
	return p.Tool.Name, p.Tool.Arguments
}

// marshalsAsIs reports whether json.Marshal writes the raw JSON value v
// byte for byte as it is: it compacts a json.RawMessage (dropping the
// spaces, tabs and line ends between tokens) and escapes '<', '>', '&'
// and U+2028/U+2029 (whose UTF-8 starts with 0xE2) in it. A value with
// none of these bytes anywhere, in its strings included, is left as it
// is; one with any may not be.
func marshalsAsIs(v json.RawMessage) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return true
}

// toolCall reads a tools/call's params: its name and arguments.
func toolCall(params json.RawMessage) (string, json.RawMessage) {
	var c struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if len(params) == 0 || json.Unmarshal(params, &c) != nil {
		return "", nil
	}
	return c.Name, c.Arguments
}

// Route is who carries the call out: the upstream the client called (a
// decision naming another is refused: a client's call goes to the
// server it called). An escalation that needs the caller's approval
// from a client that cannot be asked (it declared no elicitation) is
// incapable at once, unless the other approvers named can reach the
// quorum: nobody is asked in vain, and the client is not left waiting.
func (b *Binding) Route(_ context.Context, p *lifecycle.Proposal, current string, d decision.Decision) (target, incapable string) {
	target = current
	if target == "" {
		target = p.Addressee
	}
	if d.Target != "" && d.Target != target {
		return "", fmt.Sprintf("the decision names target %q, but the call was made to upstream %q", d.Target, target)
	}
	if target == "" {
		return "", "no upstream to send the call to"
	}
	if d.Action == decision.Escalate && slices.Contains(d.Approvers, mcpfront.Caller) {
		e, _ := ReadEnvelope(p)
		if !e.Elicitation && len(d.Approvers)-1 < max(d.Quorum, 1) {
			return "", "this client cannot ask you: it did not declare elicitation support, and the policy asks " + mcpfront.Caller
		}
	}
	return target, ""
}

// ids mints the core's ids. Nothing MCP carries names them across
// processes (the SDK numbers its own JSON-RPC messages): the envelope
// and decision ids are UUIDv7 (unique across sessions and restarts), a
// prompt's is random (unpredictable, as lifecycle.IDs asks), and the
// JSON-RPC ids count up in this process.
type ids struct{ rpc atomic.Int64 }

func (i *ids) EnvelopeID() string { return uuid.Must(uuid.NewV7()).String() }
func (i *ids) RPCID() int64       { return i.rpc.Add(1) }
func (i *ids) DecisionID() string { return uuid.Must(uuid.NewV7()).String() }
func (i *ids) PromptID() string   { return uuid.NewString() }

// reserve hands out n JSON-RPC ids from the same count.
func (i *ids) reserve(n int) []int64 {
	last := i.rpc.Add(int64(n))
	out := make([]int64, n)
	for k := range out {
		out[k] = last - int64(n) + 1 + int64(k)
	}
	return out
}

// errNoRelay: the MCP front end never sends a call as a task (Route
// says so), so there is no task's outcome to relay.
var errNoRelay = errors.New("mcpbind: the MCP front end sends no task-augmented calls")
