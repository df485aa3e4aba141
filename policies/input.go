package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/open-policy-agent/opa/v1/ast"
)

// Input is what the policy sees as `input`. It mirrors the input document of
// the policy contract in docs/design.md. Fields left at their zero value are
// absent from the document: the engine never invents what it does not know.
type Input struct {
	// FrontEnd is where the proposal came from: "mew" (a space's
	// mcp/proposal) or "mcp" (an MCP client's tools/call through
	// fulfiller mcp), so that one policy file can serve both and tell
	// them apart where it must; "" leaves input.front_end out.
	FrontEnd string
	Proposal json.RawMessage // the envelope exactly as received
	Method   string          // payload.method
	Params   json.RawMessage // payload.params; nil when the proposal had none
	Tool     *Tool           // the tool a tools/call names, when known
	Proposer *Participant    // who sent the proposal
	Space    *Space          // the space and who is in it
	Agent    AgentInfo       // the fulfiller itself; absent when zero
	Approval *Approval       // set only when asked again after a human answered
	Now      time.Time       // evaluation time; also what time.now_ns() returns
	// Grants are the live grants that match the proposal's proposer and
	// tool (docs/design.md "Grants"), each a JSON object; nil leaves input.grants
	// out. What a grant means is the policy's decision.
	Grants []json.RawMessage
}

// Tool describes the tool a tools/call proposal names.
type Tool struct {
	Name        string
	Server      string          // participant id of the tool owner
	Arguments   json.RawMessage // params.arguments
	Description string
	// Annotations are what policies decide on: for a tool the operator
	// declared (--tool-metadata), the operator's annotations alone; for
	// any other, the owner's; nil when neither gave any.
	Annotations json.RawMessage
	// OwnerAnnotations are the tool owner's annotations, verbatim from
	// tools/list; nil when it gave none (a tool behind mew bridge never
	// does).
	OwnerAnnotations json.RawMessage
	// Execution is the tool's execution block from tools/list (MCP
	// 2025-11-25: taskSupport says whether it runs as a task), verbatim;
	// nil when the owner gave none.
	Execution json.RawMessage
	// Changed says the tool's definition (description, input schema,
	// annotations) differs from the one pinned for its server: a tool
	// changed under the user (a "rug pull") is the policy's to stop.
	// Digest is the definition's digest now, PinnedDigest the pinned
	// one; both are set only when Changed is.
	Changed              bool
	Digest, PinnedDigest string
}

// Participant is a member of the space.
type Participant struct {
	ID           string
	Capabilities json.RawMessage // as in the gateway's welcome/presence
	// Client is an MCP client's clientInfo as it sent it (name, version):
	// a claim, not an identity, which the id is.
	Client json.RawMessage
}

// Space is the space the fulfiller serves.
type Space struct {
	ID           string
	Participants []Participant
}

// AgentInfo is the fulfiller's own state, for policies that shed load.
// The zero value means "unknown" and leaves input.agent out.
type AgentInfo struct {
	ID         string
	Pending    int // proposals waiting (being decided, at a human, for a slot)
	Inflight   int // fulfilment requests awaiting a response
	MaxPending int
}

// Approval is the human answer an edited call is re-checked with.
type Approval struct {
	By      []string        // approvers who accepted
	Content json.RawMessage // the form content they sent
}

// Keys of the input document, made once.
var (
	keyProposal     = ast.StringTerm("proposal")
	keyMethod       = ast.StringTerm("method")
	keyParams       = ast.StringTerm("params")
	keyTool         = ast.StringTerm("tool")
	keyName         = ast.StringTerm("name")
	keyServer       = ast.StringTerm("server")
	keyArguments    = ast.StringTerm("arguments")
	keyDescription  = ast.StringTerm("description")
	keyAnnotations  = ast.StringTerm("annotations")
	keyOwnerAnnot   = ast.StringTerm("owner_annotations")
	keyExecution    = ast.StringTerm("execution")
	keyProposer     = ast.StringTerm("proposer")
	keyID           = ast.StringTerm("id")
	keyCapabilities = ast.StringTerm("capabilities")
	keySpace        = ast.StringTerm("space")
	keyParticipants = ast.StringTerm("participants")
	keyAgent        = ast.StringTerm("agent")
	keyPending      = ast.StringTerm("pending")
	keyInflight     = ast.StringTerm("inflight")
	keyMaxPending   = ast.StringTerm("max_pending")
	keyApproval     = ast.StringTerm("approval")
	keyBy           = ast.StringTerm("by")
	keyContent      = ast.StringTerm("content")
	keyNow          = ast.StringTerm("now")
	keyGrants       = ast.StringTerm("grants")
	keyFrontEnd     = ast.StringTerm("front_end")
	keyChanged      = ast.StringTerm("changed")
	keyDigest       = ast.StringTerm("digest")
	keyPinnedDigest = ast.StringTerm("pinned_digest")
	keyClient       = ast.StringTerm("client")
)

// Value builds the input document as an ast.Value, the form the evaluator
// works on. Building it directly skips the map[string]any that rego would
// otherwise make and convert on every decision.
func (in *Input) Value() (ast.Value, error) {
	return in.value(nil, allFields)
}

// value builds the document. cache, when not nil, remembers parsed values of
// raw JSON that repeats from one proposal to the next (capabilities,
// annotations), so that only the proposal itself is parsed every time.
//
// Only the top-level fields in need are built: a field no rule can read
// cannot change a decision, and parsing the proposal is the biggest cost of
// building the input.
func (in *Input) value(cache *inputCache, need fieldSet) (ast.Value, error) {
	var slab termSlab
	var buf [10][2]*ast.Term
	b := objBuilder{pairs: buf[:0], slab: &slab}

	if in.FrontEnd != "" && need.has(fieldFrontEnd) {
		b.add(keyFrontEnd, ast.String(in.FrontEnd))
	}
	var p *jsonParser
	if in.Proposal != nil && need.has(fieldProposal) {
		p = newJSONParser(in.Proposal)
		p.track = true
		v, err := p.document()
		if err != nil {
			return nil, fmt.Errorf("proposal: %w", err)
		}
		b.add(keyProposal, v)
	}
	if in.Method != "" && need.has(fieldMethod) {
		b.add(keyMethod, ast.String(in.Method))
	}
	if in.Params != nil && need.has(fieldParams) {
		v, err := p.reuse(in.Params, in.Proposal, "params")
		if err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		b.add(keyParams, v)
	}
	if t := in.Tool; t != nil && need.has(fieldTool) {
		var buf [10][2]*ast.Term
		tb := objBuilder{pairs: buf[:0], slab: &slab}
		if t.Name != "" {
			tb.add(keyName, ast.String(t.Name))
		}
		if t.Server != "" {
			tb.add(keyServer, ast.String(t.Server))
		}
		if t.Arguments != nil {
			v, err := p.reuse(t.Arguments, in.Proposal, "arguments")
			if err != nil {
				return nil, fmt.Errorf("tool.arguments: %w", err)
			}
			tb.add(keyArguments, v)
		}
		if t.Description != "" {
			tb.add(keyDescription, ast.String(t.Description))
		}
		if t.Annotations != nil {
			v, err := cache.value(t.Annotations)
			if err != nil {
				return nil, fmt.Errorf("tool.annotations: %w", err)
			}
			tb.add(keyAnnotations, v)
		}
		if t.OwnerAnnotations != nil {
			v, err := cache.value(t.OwnerAnnotations)
			if err != nil {
				return nil, fmt.Errorf("tool.owner_annotations: %w", err)
			}
			tb.add(keyOwnerAnnot, v)
		}
		if t.Execution != nil {
			v, err := cache.value(t.Execution)
			if err != nil {
				return nil, fmt.Errorf("tool.execution: %w", err)
			}
			tb.add(keyExecution, v)
		}
		if t.Changed {
			tb.add(keyChanged, ast.Boolean(true))
			tb.add(keyDigest, ast.String(t.Digest))
			tb.add(keyPinnedDigest, ast.String(t.PinnedDigest))
		}
		b.add(keyTool, tb.object())
	}
	if in.Proposer != nil && need.has(fieldProposer) {
		v, err := cache.participant(in.Proposer)
		if err != nil {
			return nil, fmt.Errorf("proposer: %w", err)
		}
		b.add(keyProposer, v)
	}
	if in.Space != nil && need.has(fieldSpace) {
		v, err := cache.space(in.Space)
		if err != nil {
			return nil, fmt.Errorf("space: %w", err)
		}
		b.add(keySpace, v)
	}
	if a := in.Agent; a != (AgentInfo{}) && need.has(fieldAgent) {
		b.add(keyAgent, cache.agent(a))
	}
	if ap := in.Approval; ap != nil && need.has(fieldApproval) {
		var buf [2][2]*ast.Term
		apb := objBuilder{pairs: buf[:0], slab: &slab}
		by := make([]*ast.Term, len(ap.By))
		for i, id := range ap.By {
			by[i] = ast.StringTerm(id)
		}
		apb.add(keyBy, ast.NewArray(by...))
		if ap.Content != nil {
			v, err := jsonToValue(ap.Content)
			if err != nil {
				return nil, fmt.Errorf("approval.content: %w", err)
			}
			apb.add(keyContent, v)
		}
		b.add(keyApproval, apb.object())
	}
	if !in.Now.IsZero() && need.has(fieldNow) {
		b.add(keyNow, ast.String(in.Now.UTC().Format(time.RFC3339Nano)))
	}
	if in.Grants != nil && need.has(fieldGrants) {
		gs := make([]*ast.Term, len(in.Grants))
		for i, g := range in.Grants {
			v, err := jsonToValue(g)
			if err != nil {
				return nil, fmt.Errorf("grants[%d]: %w", i, err)
			}
			if _, ok := v.(ast.Object); !ok {
				return nil, fmt.Errorf("grants[%d]: must be an object, got %s", i, ast.ValueName(v))
			}
			gs[i] = ast.NewTerm(v)
		}
		b.add(keyGrants, ast.NewArray(gs...))
	}
	return b.object(), nil
}

func (s *Space) value(cache *inputCache) (ast.Value, error) {
	var buf [2][2]*ast.Term
	sb := objBuilder{pairs: buf[:0], slab: new(termSlab)}
	if s.ID != "" {
		sb.add(keyID, ast.String(s.ID))
	}
	if s.Participants != nil {
		terms := make([]*ast.Term, len(s.Participants))
		for i := range s.Participants {
			v, err := s.Participants[i].value(cache)
			if err != nil {
				return nil, fmt.Errorf("participants[%d]: %w", i, err)
			}
			terms[i] = ast.NewTerm(v)
		}
		sb.add(keyParticipants, ast.NewArray(terms...))
	}
	return sb.object(), nil
}

func (a AgentInfo) value() ast.Value {
	var buf [4][2]*ast.Term
	ab := objBuilder{pairs: buf[:0], slab: new(termSlab)}
	if a.ID != "" {
		ab.add(keyID, ast.String(a.ID))
	}
	ab.add(keyPending, ast.InternedTerm(a.Pending).Value)
	ab.add(keyInflight, ast.InternedTerm(a.Inflight).Value)
	ab.add(keyMaxPending, ast.InternedTerm(a.MaxPending).Value)
	return ab.object()
}

func (pt *Participant) value(cache *inputCache) (ast.Value, error) {
	var buf [3][2]*ast.Term
	pb := objBuilder{pairs: buf[:0], slab: new(termSlab)}
	if pt.ID != "" {
		pb.add(keyID, ast.String(pt.ID))
	}
	if pt.Capabilities != nil {
		v, err := cache.value(pt.Capabilities)
		if err != nil {
			return nil, fmt.Errorf("capabilities: %w", err)
		}
		pb.add(keyCapabilities, v)
	}
	if pt.Client != nil {
		v, err := cache.value(pt.Client)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		pb.add(keyClient, v)
	}
	return pb.object(), nil
}

// MarshalJSON writes the input document exactly as the policy sees it.
func (in *Input) MarshalJSON() ([]byte, error) {
	v, err := in.Value()
	if err != nil {
		return nil, err
	}
	return marshalValue(v)
}

func marshalValue(v ast.Value) ([]byte, error) {
	x, err := ast.JSON(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(x)
}

// objBuilder collects the members of an object whose keys are known to be
// distinct, so the object is made in one go.
type objBuilder struct {
	pairs [][2]*ast.Term
	slab  *termSlab
}

func (b *objBuilder) add(k *ast.Term, v ast.Value) {
	b.pairs = append(b.pairs, [2]*ast.Term{k, b.slab.term(v)})
}

// termSlab hands out terms from a block, one allocation for many.
type termSlab struct{ free []ast.Term }

func (s *termSlab) term(v ast.Value) *ast.Term {
	if len(s.free) == 0 {
		s.free = make([]ast.Term, 16)
	}
	t := &s.free[0]
	s.free = s.free[1:]
	t.Value = v
	return t
}

func (b *objBuilder) object() ast.Value { return ast.NewObject(b.pairs...) }

// reuse returns the value of raw, taking it from the proposal just parsed
// when raw holds the very bytes of payload.params (or of
// payload.params.arguments) there — which is what a caller that decoded the
// envelope hands in — and parsing it otherwise.
func (p *jsonParser) reuse(raw, proposal json.RawMessage, which string) (ast.Value, error) {
	if p != nil {
		var span jsonSpan
		var v ast.Value
		switch which {
		case "params":
			span, v = p.params.span, p.params.value
		case "arguments":
			span, v = p.args.span, p.args.value
		}
		if v != nil && bytes.Equal(raw, proposal[span.start:span.end]) {
			return v, nil
		}
	}
	return jsonToValue(raw)
}

// inputCache keeps the values of input parts that repeat from one proposal
// to the next — capability and annotation blobs, the space, the
// proposers, the agent's counts — so that mostly only the proposal itself
// is parsed per decision. A nil *inputCache caches nothing.
//
// Sharing a value between decisions is safe because evaluation never
// changes the input: topdown treats every value as immutable.
type inputCache struct {
	mu  sync.RWMutex
	raw map[string]ast.Value // raw JSON → value; cleared when full
	// proposers: id → capabilities as raw JSON → the participant's
	// value; cleared when full. (Two levels, so that a lookup needs no
	// key built out of both.)
	proposers map[string]map[string]ast.Value
	nProp     int
	agents    map[AgentInfo]ast.Value // cleared when full

	lastSpace atomic.Pointer[spaceEntry]
}

// rawCacheMax bounds the raw cache crudely — it is cleared when full —
// because the distinct capability and annotation blobs of a space are few
// and a churning one only costs a re-parse.
const rawCacheMax = 1024

func (c *inputCache) value(raw []byte) (ast.Value, error) {
	if c == nil {
		return jsonToValue(raw)
	}
	c.mu.RLock()
	v, ok := c.raw[string(raw)]
	c.mu.RUnlock()
	if ok {
		return v, nil
	}
	v, err := jsonToValue(raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.raw == nil || len(c.raw) >= rawCacheMax {
		c.raw = make(map[string]ast.Value)
	}
	c.raw[string(raw)] = v
	c.mu.Unlock()
	return v, nil
}

// participant returns the value of a proposer, reusing the one built
// for the same id and capabilities before: a space has few proposers,
// each proposing many times.
func (c *inputCache) participant(pt *Participant) (ast.Value, error) {
	if c == nil {
		return pt.value(nil)
	}
	// One proposer's value per capabilities and clientInfo: a client
	// that reconnects with another version is another value.
	key := string(pt.Capabilities)
	if pt.Client != nil {
		key += "\x00" + string(pt.Client)
	}
	c.mu.RLock()
	v, ok := c.proposers[pt.ID][key]
	c.mu.RUnlock()
	if ok && (pt.Capabilities == nil) == (v.(ast.Object).Get(keyCapabilities) == nil) &&
		(pt.Client == nil) == (v.(ast.Object).Get(keyClient) == nil) {
		return v, nil
	}
	v, err := pt.value(c)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.proposers == nil || c.nProp >= rawCacheMax {
		c.proposers, c.nProp = make(map[string]map[string]ast.Value), 0
	}
	byCaps := c.proposers[pt.ID]
	if byCaps == nil {
		byCaps = make(map[string]ast.Value)
		c.proposers[pt.ID] = byCaps
	}
	if _, ok := byCaps[key]; !ok {
		c.nProp++
	}
	byCaps[key] = v
	c.mu.Unlock()
	return v, nil
}

// agent returns the value of the agent's counts, reusing the one built
// for the same counts before: they take few distinct values (pending and
// in-flight work between 0 and the limits).
func (c *inputCache) agent(a AgentInfo) ast.Value {
	if c == nil {
		return a.value()
	}
	c.mu.RLock()
	v, ok := c.agents[a]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = a.value()
	c.mu.Lock()
	if c.agents == nil || len(c.agents) >= rawCacheMax {
		c.agents = make(map[AgentInfo]ast.Value)
	}
	c.agents[a] = v
	c.mu.Unlock()
	return v
}

// spaceEntry is the last space seen and its value. Participants are
// copied, so that a caller changing its slice later cannot make the entry
// lie.
type spaceEntry struct {
	space Space
	value ast.Value
}

// space returns the value of s, reusing the previous one when the space has
// not changed — the usual case: membership changes far less often than
// proposals arrive, and comparing is much cheaper than building.
func (c *inputCache) space(s *Space) (ast.Value, error) {
	if c == nil {
		return s.value(nil)
	}
	if e := c.lastSpace.Load(); e != nil && e.space.equal(s) {
		return e.value, nil
	}
	v, err := s.value(c)
	if err != nil {
		return nil, err
	}
	c.lastSpace.Store(&spaceEntry{space: s.clone(), value: v})
	return v, nil
}

func (s *Space) equal(o *Space) bool {
	if s.ID != o.ID || len(s.Participants) != len(o.Participants) || (s.Participants == nil) != (o.Participants == nil) {
		return false
	}
	for i := range s.Participants {
		a, b := &s.Participants[i], &o.Participants[i]
		if a.ID != b.ID || !bytes.Equal(a.Capabilities, b.Capabilities) || (a.Capabilities == nil) != (b.Capabilities == nil) {
			return false
		}
	}
	return true
}

func (s *Space) clone() Space {
	c := Space{ID: s.ID}
	if s.Participants != nil {
		c.Participants = make([]Participant, len(s.Participants))
		for i, p := range s.Participants {
			c.Participants[i] = Participant{ID: p.ID}
			c.Participants[i].Capabilities = bytes.Clone(p.Capabilities) // keeps nil nil

		}
	}
	return c
}

// Document is a complete input document, evaluated as it is.
type Document struct {
	value ast.Value
}

// ParseDocument reads a full input document (a JSON object). Nothing is
// added or checked beyond JSON syntax: `fulfiller eval` evaluates such a
// document verbatim so that a decision can be reproduced from a log.
func ParseDocument(raw []byte) (*Document, error) {
	v, err := jsonToValue(raw)
	if err != nil {
		return nil, err
	}
	if _, ok := v.(ast.Object); !ok {
		return nil, fmt.Errorf("input document must be a JSON object, got %s", ast.ValueName(v))
	}
	return &Document{value: v}, nil
}

// Document returns the input document the policy would see for in.
func (in *Input) Document() (*Document, error) {
	v, err := in.Value()
	if err != nil {
		return nil, err
	}
	return &Document{value: v}, nil
}

// now is the document's "now", or the zero time when it has none that
// parses.
func (d *Document) now() time.Time {
	obj, ok := d.value.(ast.Object)
	if !ok {
		return time.Time{}
	}
	t := obj.Get(keyNow)
	if t == nil {
		return time.Time{}
	}
	s, ok := t.Value.(ast.String)
	if !ok {
		return time.Time{}
	}
	now, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		return time.Time{}
	}
	return now
}

// MarshalJSON writes the document.
func (d *Document) MarshalJSON() ([]byte, error) {
	return marshalValue(d.value)
}

// ErrNotProposal is returned by ParseEvalInput for JSON that is neither an
// input document, a proposal envelope nor an MCP tools/call request.
var ErrNotProposal = errors.New(`neither an input document (an object with a "proposal" key), an mcp/proposal envelope nor an MCP tools/call request`)

// ParseEvalInput reads what `fulfiller eval --input` takes: a full input
// document, recognised by its "proposal" key and used verbatim; a bare
// mcp/proposal envelope, around which the documented input is built with
// now (see InputFromEnvelope); or an MCP client's tools/call request, as
// fulfiller mcp would see it (see InputFromMCPCall).
func ParseEvalInput(raw []byte, now time.Time) (*Document, error) {
	doc, _, err := ParseEvalInputWith(raw, now, nil)
	return doc, err
}

// ParseEvalInputWith is ParseEvalInput, with complete (when not nil)
// called on the input built around a bare envelope before it becomes the
// document — to add what the caller knows that the envelope does not say,
// such as the annotations the operator declared for the tool
// (`fulfiller eval --tool-metadata`). A full input document is used as it
// is; envelope says which of the two raw was.
func ParseEvalInputWith(raw []byte, now time.Time, complete func(*Input) error) (doc *Document, envelope bool, err error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, false, fmt.Errorf("line %d: %w", lineAt(raw, int(se.Offset)), err)
		}
		if _, err := jsonToValue(raw); err != nil {
			return nil, false, err
		}
		return nil, false, ErrNotProposal
	}
	if _, ok := probe["proposal"]; ok {
		doc, err := ParseDocument(raw)
		return doc, false, err
	}
	build := InputFromEnvelope
	if _, ok := probe["jsonrpc"]; ok {
		build = InputFromMCPCall
	}
	in, err := build(raw, now)
	if err != nil {
		return nil, true, err
	}
	if complete != nil {
		if err := complete(in); err != nil {
			return nil, true, err
		}
	}
	doc, err = in.Document()
	return doc, true, err
}

// InputFromEnvelope builds the input for a bare proposal envelope as the
// sidecar would, from what the envelope itself says: proposal, method,
// params, proposer.id (its from), tool.name and tool.arguments for
// tools/call, and now. What only the running sidecar knows — the tool's
// owner and annotations, capabilities, the space, the agent's load — is
// left out rather than guessed.
func InputFromEnvelope(raw []byte, now time.Time) (*Input, error) {
	var env struct {
		Kind    string          `json:"kind"`
		From    string          `json:"from"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := agent.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotProposal, err)
	}
	if env.Kind != "mcp/proposal" {
		return nil, fmt.Errorf("%w (kind is %q)", ErrNotProposal, env.Kind)
	}
	var payload struct {
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := agent.Unmarshal(env.Payload, &payload); err != nil || payload.Method == nil {
		return nil, errors.New("proposal payload must be an object with a string method")
	}
	in := &Input{
		FrontEnd: "mew",
		Proposal: raw,
		Method:   *payload.Method,
		Now:      now,
	}
	if env.From != "" {
		in.Proposer = &Participant{ID: env.From}
	}
	if len(payload.Params) > 0 && !bytes.Equal(payload.Params, []byte("null")) {
		if payload.Params[0] != '{' {
			return nil, errors.New("proposal params must be an object")
		}
		in.Params = payload.Params
	}
	if err := in.toolOfCall(); err != nil {
		return nil, fmt.Errorf("proposal params: %w", err)
	}
	return in, nil
}

// InputFromMCPCall builds the input for an MCP client's tools/call
// request (JSON-RPC, as the client sends it to fulfiller mcp): front_end
// "mcp", proposal (the request as received), method, params, tool.name,
// tool.arguments, and now. Who the client is and which upstream serves
// the tool are fulfiller mcp's to say (its --client-id or token, its
// upstream's name): they are left out, as InputFromEnvelope leaves out
// what only the sidecar knows.
func InputFromMCPCall(raw []byte, now time.Time) (*Input, error) {
	var req struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  *string         `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	if err := agent.Unmarshal(raw, &req); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotProposal, err)
	}
	if req.Method == nil || *req.Method != "tools/call" {
		m := "none"
		if req.Method != nil {
			m = strconv.Quote(*req.Method)
		}
		return nil, fmt.Errorf("%w (a JSON-RPC request whose method is %s: fulfiller mcp decides tools/call only, and passes the rest through)", ErrNotProposal, m)
	}
	if len(req.Params) == 0 || req.Params[0] != '{' {
		return nil, errors.New("tools/call params must be an object with the tool's name")
	}
	in := &Input{FrontEnd: "mcp", Proposal: raw, Method: *req.Method, Params: req.Params, Now: now}
	if err := in.toolOfCall(); err != nil {
		return nil, fmt.Errorf("tools/call params: %w", err)
	}
	if in.Tool == nil {
		return nil, errors.New("tools/call params must name the tool (a string name)")
	}
	return in, nil
}

// toolOfCall fills Tool's name and arguments from a tools/call's params.
func (in *Input) toolOfCall() error {
	if in.Method == "tools/call" && in.Params != nil {
		var call struct {
			Name      any             `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := agent.Unmarshal(in.Params, &call); err != nil {
			return err
		}
		if name, ok := call.Name.(string); ok {
			in.Tool = &Tool{Name: name}
			if len(call.Arguments) > 0 {
				in.Tool.Arguments = call.Arguments
			}
		}
	}
	return nil
}
