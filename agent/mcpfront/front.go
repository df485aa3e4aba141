package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config configures a Front.
type Config struct {
	// Engine decides the calls. It gets the *Front as its Effects from
	// the composition root (see the package doc).
	Engine Engine
	// Pins keeps the tool definitions ([MemPins]).
	Pins Pins
	// ClientID is the proposer of a client that no bearer token names
	// (stdio, and serve without --client-tokens) ["local"].
	ClientID string
	// Version is fulfiller's, in the clientInfo the upstreams see.
	Version string
	// ProgressEvery: while a call with a progressToken is held, a
	// progress notification this often, so that a client that resets its
	// timeout on progress keeps waiting for the approvers [10s].
	ProgressEvery time.Duration
	// RetryWait is how long a call whose client was sent input_required
	// (2026-07-28) waits for the client's retry before it is withdrawn as
	// disconnected [10m].
	RetryWait time.Duration
	// BackoffMin and BackoffMax bound the wait before an upstream that
	// ended is started again [100ms, 10s]; ConnectTimeout bounds its
	// start (process, initialize, first tools/list) [30s].
	BackoffMin, BackoffMax, ConnectTimeout time.Duration
	// Reattach, when set, re-attaches a client's retry of a call held
	// for approval to it, here or on another instance, and keeps a held
	// call whose client went away for its retry (reattach.go).
	Reattach Reattacher
	// Logger logs to stderr, never stdout ([slog.DiscardHandler]).
	Logger *slog.Logger
}

// Front is the MCP front end: the proxy in front of the upstreams, and
// the Effects the engine carries out through it. Make one with New,
// run it with Run, and serve clients with ServeStdio or Handler.
type Front struct {
	cfg  Config
	eng  Engine
	pins Pins
	log  *slog.Logger
	ups  map[string]*upstream

	// ctx is Run's: what the Front starts ends with it; wg waits for it.
	ctx     context.Context
	running chan struct{} // closed when Run starts
	wg      sync.WaitGroup
	jobs    chan func() // to a goroutine of start that waits for one

	mu      sync.Mutex
	closing bool // Run is ending: nothing more is started (see goes)
	held    map[string]*held
	// tokens maps the progress token sent upstream to its call; reqs
	// the requests out, by proposal (they outlive a withdrawn call until
	// the engine cancels them or they end).
	tokens map[string]*held
	reqs   map[string]context.CancelFunc

	// testSessionEnded, set by a test before Run, is called when an
	// upstream's session has ended and before the upstream is marked
	// down: the moment in which a call still finds the ended session.
	testSessionEnded func()
}

// held is a tools/call waiting for its answer.
type held struct {
	p      Proposal
	u      *upstream
	answer chan Answer // one answer, buffered
	// mrtr: the client is asked through input_required results (asks),
	// and comes back with its answers in a retry of the call.
	mrtr bool
	asks chan Prompt

	mu sync.Mutex
	// The handler holding the call now (nil ctx while an input_required
	// result waits for the client's retry): its session, its context
	// (it carries the request for the transport), its progressToken.
	ss       *mcp.ServerSession
	ctx      context.Context
	token    any
	detached uint64 // >0 while waiting for a retry: which wait
	expire   *time.Timer
	answered bool
	gone     bool
	prompts  map[string]context.CancelFunc
	progress float64
	// relayed is the upstream's last result as send decoded it and as
	// the engine got it (raw): an Answer that relays those bytes is
	// answered with the decoded result, not decoded again.
	relayed *relayedResult

	// escalated: the engine holds the call for approvers (Reattach).
	escalated bool

	// reply, for a call its client's connection took (callDirect),
	// writes its answer; nil: the SDK's handler holds the call (hold).
	// Such a call is held by a goroutine only once it must be (promote):
	// holding says it is; until then, stopWatch stops what would promote
	// it (the client's cancellation or departure, the progress tick).
	reply     replyFunc
	holding   bool
	stopWatch func() bool
	tick      *time.Timer
}

// relayedResult is an upstream's result as JSON, and decoded when it
// was (res nil: relayed as it came, relayable).
type relayedResult struct {
	raw json.RawMessage
	res *mcp.CallToolResult
}

// handler is who holds h now (nil ctx: nobody, a retry is awaited).
func (h *held) handler() (*mcp.ServerSession, context.Context, any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ss, h.ctx, h.token
}

// Errors of the Effects.
var (
	// ErrUnknown: no call of that proposal id waits here (it was answered
	// or withdrawn, or is another instance's).
	ErrUnknown = errors.New("mcpfront: no such call waits here")
	// ErrNoElicitation: the client did not declare elicitation, so
	// fulfiller never sends it one.
	ErrNoElicitation = errors.New("mcpfront: the client did not declare elicitation support: this client cannot ask you")
	// ErrAnswered: the call has its answer already.
	ErrAnswered = errors.New("mcpfront: the call was answered already")
)

// New makes a Front for ups.
func New(cfg Config, ups ...Upstream) (*Front, error) {
	if cfg.Engine == nil {
		return nil, errors.New("mcpfront: no engine")
	}
	if cfg.Pins == nil {
		cfg.Pins = &MemPins{}
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "local"
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.RetryWait <= 0 {
		cfg.RetryWait = 10 * time.Minute
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 100 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(10*time.Second, cfg.BackoffMin)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Front{cfg: cfg, eng: cfg.Engine, pins: cfg.Pins, log: cfg.Logger, ups: map[string]*upstream{},
		running: make(chan struct{}), jobs: make(chan func()), held: map[string]*held{}, tokens: map[string]*held{}, reqs: map[string]context.CancelFunc{}}
	for _, up := range ups {
		// The only upstream may be nameless: named after its serverInfo
		// at its first start (stdio).
		if (up.Name != "" || len(ups) > 1) && !nameRE.MatchString(up.Name) {
			return nil, fmt.Errorf("mcpfront: upstream name %q: letters, digits, '.', '_' and '-' only", up.Name)
		}
		if f.ups[up.Name] != nil {
			return nil, fmt.Errorf("mcpfront: two upstreams named %q", up.Name)
		}
		u := &upstream{Upstream: up, f: f, ready: make(chan struct{}), down: errors.New("not started yet")}
		u.client = u.newClient()
		f.ups[up.Name] = u
	}
	return f, nil
}

// Run supervises the upstreams until ctx ends, then closes them and
// waits for everything the Front started (upstream requests, prompts).
// Clients' calls still held are answered "other" as it ends.
func (f *Front) Run(ctx context.Context) error {
	f.mu.Lock()
	f.ctx = ctx
	f.mu.Unlock()
	close(f.running)
	for _, u := range f.ups {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			u.supervise(ctx)
		}()
	}
	<-ctx.Done()
	// Calls waiting for a 2026-07-28 client's retry end with the Front.
	f.mu.Lock()
	f.closing = true
	var waiting []*held
	for _, h := range f.held {
		waiting = append(waiting, h)
	}
	f.mu.Unlock()
	for _, h := range waiting {
		if _, hctx, _ := h.handler(); hctx == nil {
			f.release(h)
		}
	}
	// The clients' sessions end with the Front (an HTTP one lives past
	// its requests until it is deleted or idle).
	for _, u := range f.ups {
		u.mu.Lock()
		s := u.server
		u.mu.Unlock()
		if s == nil {
			continue
		}
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	}
	f.wg.Wait()
	return nil
}

// errClosed: the Front is not running (Run has not started, or ended).
var errClosed = errors.New("mcpfront: the front end is not running")

// goes counts a goroutine the Front owns, unless Run is not running:
// it must not be added while Run waits for the others.
func (f *Front) goes() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx == nil || f.closing {
		return false
	}
	f.wg.Add(1)
	return true
}

// workerIdle is how long a goroutine of start waits for its next job.
const workerIdle = 10 * time.Second

// start runs job in a goroutine the Front owns (false: the Front is not
// running, and job does not run): one that ran an earlier job and waits
// for the next, or a new one. Reused, a goroutine keeps the stack it
// grew to the SDK's depth: a new one per upstream request spent a tenth
// of what fulfiller adds to a relayed call growing its stack.
func (f *Front) start(job func()) bool {
	select {
	case f.jobs <- job:
		return true
	default:
	}
	if !f.goes() {
		return false
	}
	go f.worker(job)
	return true
}

// worker runs job, then the jobs start hands it, until it has waited
// workerIdle for one or Run ends.
func (f *Front) worker(job func()) {
	defer f.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-f.jobs:
		case <-idle.C:
			return
		case <-f.ctx.Done():
			return
		}
	}
}

// Ready waits until upstream name has been started once (its server
// exists), or ctx ends.
func (f *Front) Ready(ctx context.Context, name string) error {
	u := f.ups[name]
	if u == nil {
		return fmt.Errorf("mcpfront: no upstream %q", name)
	}
	select {
	case <-u.ready:
		return nil
	case <-ctx.Done():
		u.mu.Lock()
		why := u.down
		u.mu.Unlock()
		return fmt.Errorf("upstream %s (%s) is not up: %v: %w", name, u.What, why, ctx.Err())
	}
}

// ServeStdio serves one client on t (stdio: mcp.StdioTransport) in front
// of upstream name, until the client leaves or ctx ends.
func (f *Front) ServeStdio(ctx context.Context, name string, t mcp.Transport) error {
	if err := f.Ready(ctx, name); err != nil {
		return err
	}
	u := f.ups[name]
	ft := &frontTransport{Transport: t, f: f, u: u}
	ss, err := u.server.Connect(ctx, ft, nil)
	if err != nil {
		return fmt.Errorf("mcpfront: the client's session did not start: %w", err)
	}
	ft.conn.ss.Store(ss) // its tools/calls are taken at the connection from now on
	stop := context.AfterFunc(ctx, func() { _ = ss.Close() })
	defer stop()
	return ss.Wait()
}

// mrtrVersion is the first revision whose clients are asked through
// input_required results they retry (SEP-2322), not elicitation/create
// sent while the call is held.
const mrtrVersion = "2026-07-28"

// newServer is the server the clients of u see: the upstream's
// serverInfo, instructions and capabilities (tools always, with
// listChanged: fulfiller tells of rug pulls), and the middleware that
// passes everything but tools/call through.
func (f *Front) newServer(u *upstream, init *mcp.InitializeResult) *mcp.Server {
	impl := &mcp.Implementation{Name: u.Name}
	var caps mcp.ServerCapabilities
	var instructions string
	if init != nil {
		if init.ServerInfo != nil {
			c := *init.ServerInfo
			impl = &c
		}
		if init.Capabilities != nil {
			caps = *init.Capabilities
		}
		instructions = init.Instructions
	}
	u.serverInfo, _ = json.Marshal(impl)
	caps.Tools = &mcp.ToolCapabilities{ListChanged: true}
	opts := &mcp.ServerOptions{Instructions: instructions, Capabilities: &caps, Logger: f.log}
	if caps.Resources != nil && caps.Resources.Subscribe {
		opts.SubscribeHandler = func(ctx context.Context, r *mcp.SubscribeRequest) error {
			cs, err := u.session()
			if err != nil {
				return err
			}
			return cs.Subscribe(ctx, r.Params)
		}
		opts.UnsubscribeHandler = func(ctx context.Context, r *mcp.UnsubscribeRequest) error {
			cs, err := u.session()
			if err != nil {
				return err
			}
			return cs.Unsubscribe(ctx, r.Params)
		}
	}
	if caps.Completions != nil {
		opts.CompletionHandler = func(ctx context.Context, r *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			cs, err := u.session()
			if err != nil {
				return nil, err
			}
			return cs.Complete(ctx, r.Params)
		}
	}
	s := mcp.NewServer(impl, opts)
	s.AddReceivingMiddleware(f.passThrough(u))
	return s
}

// passThrough answers every request but tools/call with the upstream's
// answer, and hands tools/call to the engine (call).
func (f *Front) passThrough(u *upstream) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch r := req.(type) {
			case *mcp.CallToolRequest:
				return f.call(ctx, u, r)
			case *mcp.ListToolsRequest:
				cs, err := u.session()
				if err != nil {
					return nil, err
				}
				res, err := cs.ListTools(ctx, r.Params)
				if err != nil {
					return nil, err
				}
				if err := u.observe(ctx, res.Tools, false); err != nil {
					f.log.Warn("mcp tools not pinned", "upstream", u.Name, "err", err)
				}
				return res, nil
			case *mcp.ListResourcesRequest:
				return forward(u, func(cs *mcp.ClientSession) (*mcp.ListResourcesResult, error) { return cs.ListResources(ctx, r.Params) })
			case *mcp.ListResourceTemplatesRequest:
				return forward(u, func(cs *mcp.ClientSession) (*mcp.ListResourceTemplatesResult, error) {
					return cs.ListResourceTemplates(ctx, r.Params)
				})
			case *mcp.ReadResourceRequest:
				return forward(u, func(cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) { return cs.ReadResource(ctx, r.Params) })
			case *mcp.ListPromptsRequest:
				return forward(u, func(cs *mcp.ClientSession) (*mcp.ListPromptsResult, error) { return cs.ListPrompts(ctx, r.Params) })
			case *mcp.GetPromptRequest:
				return forward(u, func(cs *mcp.ClientSession) (*mcp.GetPromptResult, error) { return cs.GetPrompt(ctx, r.Params) })
			case *mcp.ServerRequest[*mcp.SetLoggingLevelParams]:
				if cs, err := u.session(); err == nil {
					if err := cs.SetLoggingLevel(ctx, r.Params); err != nil {
						return nil, err
					}
				}
				return next(ctx, method, req) // the session's own level filters what is handed on
			}
			return next(ctx, method, req)
		}
	}
}

func forward[R mcp.Result](u *upstream, do func(*mcp.ClientSession) (R, error)) (mcp.Result, error) {
	cs, err := u.session()
	if err != nil {
		return nil, err
	}
	return do(cs)
}

// call is a tools/call: a proposal to the engine, held until its answer.
func (f *Front) call(ctx context.Context, u *upstream, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	h, res, err := f.admit(ctx, u, r, rpcIDOf(r.Extra), nil)
	if h == nil {
		return res, err
	}
	return f.hold(ctx, h)
}

// callDirect is a tools/call the client's connection took (frontConn):
// proposed as call proposes it, but not held by a goroutine. Its answer
// is written by reply, on the goroutine of the Effects.Answer that
// brings it, unless the call had to be held first (promote): then the
// same hold as call's runs, and reply writes what it returns.
func (f *Front) callDirect(ctx context.Context, u *upstream, r *mcp.CallToolRequest, rpcID json.RawMessage, reply replyFunc) {
	h, res, err := f.admit(ctx, u, r, rpcID, reply)
	if h == nil {
		reply(nil, res, err)
	}
}

// replyFunc writes a diverted call's answer: raw (its result as JSON)
// when not nil, else res or err.
type replyFunc func(raw json.RawMessage, res *mcp.CallToolResult, err error)

// admit makes r a proposal to the engine: h is the call proposed, to be
// held until its answer; nil h: r was answered at once (res, err).
func (f *Front) admit(ctx context.Context, u *upstream, r *mcp.CallToolRequest, rpcID json.RawMessage, reply replyFunc) (*held, *mcp.CallToolResult, error) {
	params := r.Params
	if err := checkCall(params); err != nil {
		return nil, nil, err
	}
	// The call as the policy reads it and approvers see it: its name and
	// arguments. Its _meta (a progressToken, the client's own keys) stays
	// with the client.
	raw, err := json.Marshal(struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}{params.Name, params.Arguments})
	if err != nil {
		return nil, nil, fmt.Errorf("mcpfront: the call's params cannot be read: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, nil, fmt.Errorf("mcpfront: no proposal id: %w", err)
	}
	ss := r.Session
	p := Proposal{ID: id.String(), RPCID: rpcID, FrontEnd: FrontEnd, Server: u.Name, Proposer: f.cfg.ClientID,
		Method: "tools/call", Params: raw, Received: time.Now()}
	if r.Extra != nil {
		if id, ok := clientOf(r.Extra.TokenInfo); ok {
			p.Proposer = id
		}
	}
	if ip := ss.InitializeParams(); ip != nil {
		if ci := ip.ClientInfo; ci != nil {
			p.Client = ClientInfo{Name: ci.Name, Version: ci.Version, Title: ci.Title}
		}
		if c := ip.Capabilities; c != nil && c.Elicitation != nil && (c.Elicitation.Form != nil || c.Elicitation.URL == nil) {
			p.Elicitation = true
		}
	}
	token := params.GetProgressToken()
	p.Progress = token != nil
	if params.RequestState != "" {
		res, err := f.resume(ctx, u, r, p.Proposer)
		return nil, res, err
	}
	p.Tool, err = u.tool(ctx, params.Name, params.Arguments)
	if err != nil {
		return nil, rejectResult(Reject{Code: "other", Message: err.Error()}), nil
	}
	h := &held{p: p, u: u, ss: ss, ctx: ctx, token: token, answer: make(chan Answer, 1), asks: make(chan Prompt, 8),
		prompts: map[string]context.CancelFunc{}, reply: reply}
	if ip := ss.InitializeParams(); ip != nil && ip.ProtocolVersion >= mrtrVersion {
		h.mrtr = true
	}
	if f.cfg.Reattach != nil {
		if res, err, done := f.reattach(ctx, h); done {
			return nil, res, err
		}
	}
	f.mu.Lock()
	f.held[p.ID] = h
	f.mu.Unlock()
	if reply != nil {
		f.watch(h)
	}
	if err := f.eng.Propose(ctx, p); err != nil {
		if reply != nil && !f.claim(h) {
			// Promoted meanwhile (the client left): its hold answers.
			return h, nil, nil
		}
		f.release(h)
		return nil, rejectResult(Reject{Code: "other", Message: "fulfiller could not take the call: " + err.Error()}), nil
	}
	return h, nil, nil
}

// hold waits for h's answer in the handler of ctx. It returns early
// with an input_required result when the caller is to be asked on a
// 2026-07-28 client: h then waits for the client's retry (resume).
func (f *Front) hold(ctx context.Context, h *held) (*mcp.CallToolResult, error) {
	detached := false
	defer func() {
		if !detached {
			f.release(h)
		}
	}()
	_, _, token := h.handler()
	var tick <-chan time.Time
	if token != nil && f.cfg.ProgressEvery > 0 {
		t := time.NewTicker(f.cfg.ProgressEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case a := <-h.answer:
			if ctx.Err() == nil {
				return h.answerResult(a)
			}
			// Answered as the client left: it is a withdrawal all the
			// same (the engine logs what it did).
			f.withdraw(h, withdrawReason(ctx))
			return nil, ctx.Err()
		case pr := <-h.asks:
			res, err := inputRequired(pr, h.p.ID)
			if err != nil {
				f.promptFailed(h, pr, err)
				continue
			}
			detached = true
			f.detach(h)
			return res, nil
		case <-tick:
			f.notifyProgress(h, "waiting for fulfiller's decision")
		case <-ctx.Done():
			if f.keepForRetry(ctx, h) {
				// Kept for the client's retry, here or elsewhere, until
				// RetryWait; the engine still holds it for the approvers.
				detached = true
				f.detach(h)
				return nil, ctx.Err()
			}
			f.withdraw(h, withdrawReason(ctx))
			return nil, ctx.Err()
		case <-f.ctx.Done():
			return rejectResult(Reject{Code: "other", Message: "fulfiller is shutting down"}), nil
		}
	}
}

// inputRequired is the result that asks a 2026-07-28 client for pr: the
// client answers it and retries the call with its answer and state.
func inputRequired(pr Prompt, state string) (*mcp.CallToolResult, error) {
	var params mcp.ElicitParams
	if err := json.Unmarshal(pr.Params, &params); err != nil {
		return nil, fmt.Errorf("the prompt's params: %w", err)
	}
	if params.Mode == "" {
		params.Mode = "form"
	}
	res := &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{pr.PromptID: &params}, RequestState: state}
	// The result type is the SDK's to set, and it sets it only for its
	// own tools: it is read back from the wire form.
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	m["resultType"] = json.RawMessage(`"input_required"`)
	if raw, err = json.Marshal(m); err != nil {
		return nil, err
	}
	out := new(mcp.CallToolResult)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

// detach leaves h waiting for the client's retry, for Config.RetryWait
// at most: a client that never retries is withdrawn as disconnected.
func (f *Front) detach(h *held) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.detached++
	wait := h.detached
	h.ss, h.ctx, h.token = nil, nil, nil
	h.expire = time.AfterFunc(f.cfg.RetryWait, func() {
		h.mu.Lock()
		still := h.detached == wait && h.ctx == nil
		h.mu.Unlock()
		if still {
			f.withdraw(h, WithdrawDisconnected)
			f.release(h)
		}
	})
}

// resume is a 2026-07-28 client's retry of a held call: its answers go
// to the engine, and the call is held again in this handler.
func (f *Front) resume(ctx context.Context, u *upstream, r *mcp.CallToolRequest, proposer string) (*mcp.CallToolResult, error) {
	params := r.Params
	h := f.lookup(params.RequestState)
	if h == nil || h.u != u || h.p.Proposer != proposer || h.p.Tool.Name != params.Name {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "tools/call: requestState names no call of this client waiting here (answered, expired, or another's)"}
	}
	h.mu.Lock()
	if h.ctx != nil || h.gone {
		h.mu.Unlock()
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: this call is not waiting for a retry"}
	}
	h.detached++ // the expiry of the wait that ends here does nothing
	if h.expire != nil {
		h.expire.Stop()
	}
	h.ss, h.ctx, h.token = r.Session, ctx, params.GetProgressToken()
	var answers []PromptAnswer
	for id, resp := range params.InputResponses {
		if _, open := h.prompts[id]; !open {
			continue // not asked, or cancelled since
		}
		delete(h.prompts, id)
		a := PromptAnswer{ProposalID: h.p.ID, PromptID: id}
		a.Result, a.Err = json.Marshal(resp)
		answers = append(answers, a)
	}
	h.mu.Unlock()
	for _, a := range answers {
		if err := f.eng.Answered(ctx, a); err != nil {
			f.log.Warn("mcp prompt answer not taken by the engine", "proposal", h.p.ID, "err", err)
		}
	}
	return f.hold(ctx, h)
}

// promptFailed tells the engine a prompt could not be asked.
func (f *Front) promptFailed(h *held, pr Prompt, err error) {
	h.mu.Lock()
	delete(h.prompts, pr.PromptID)
	h.mu.Unlock()
	if err := f.eng.Answered(f.ctx, PromptAnswer{ProposalID: h.p.ID, PromptID: pr.PromptID, Err: err}); err != nil {
		f.log.Warn("mcp prompt failure not taken by the engine", "proposal", h.p.ID, "err", err)
	}
}

// checkCall refuses a call MCP does not allow before anyone decides it:
// a tool without a name, or arguments that are not an object.
func checkCall(p *mcp.CallToolParamsRaw) error {
	if p.Name == "" {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: params.name is missing"}
	}
	args := bytes.TrimSpace(p.Arguments)
	if len(args) == 0 || string(args) == "null" {
		p.Arguments = nil
		return nil
	}
	if args[0] != '{' {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: params.arguments must be an object"}
	}
	return nil
}

// withdrawReason tells a client's notifications/cancelled (the request
// cancelled without a cause) from a connection that ended.
func withdrawReason(ctx context.Context) string {
	if context.Cause(ctx) == context.Canceled {
		return WithdrawCancelled
	}
	return WithdrawDisconnected
}

// release forgets h once its handler returned: nothing more reaches its
// client, and its prompts end.
func (f *Front) release(h *held) {
	f.mu.Lock()
	if f.held[h.p.ID] == h { // not a retry re-attached under its id since
		delete(f.held, h.p.ID)
	}
	f.mu.Unlock()
	h.mu.Lock()
	h.gone = true
	if h.expire != nil {
		h.expire.Stop()
	}
	for id, cancel := range h.prompts {
		cancel()
		delete(h.prompts, id)
	}
	h.mu.Unlock()
}

func (f *Front) withdraw(h *held, reason string) {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	if err := f.eng.Withdrawn(ctx, Withdrawal{ProposalID: h.p.ID, Reason: reason}); err != nil {
		f.log.Warn("mcp withdrawal not taken by the engine", "proposal", h.p.ID, "err", err)
	}
}

func (f *Front) lookup(id string) *held {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[id]
}

// SendRequest implements Effects.
func (f *Front) SendRequest(_ context.Context, r Request) error {
	h := f.lookup(r.ProposalID)
	if h == nil {
		return ErrUnknown
	}
	// The call as proposed (what the engine sends but for an approver's
	// edit) is not read again: call read its name and arguments.
	params := mcp.CallToolParamsRaw{Name: h.p.Tool.Name, Arguments: h.p.Tool.Arguments}
	if !bytes.Equal(r.Params, h.p.Params) {
		params = mcp.CallToolParamsRaw{}
		if err := json.Unmarshal(r.Params, &params); err != nil {
			return fmt.Errorf("mcpfront: the request's params: %w", err)
		}
	}
	// The client's _meta stays with the client; its progressToken is
	// carried below.
	out := &mcp.CallToolParams{Name: params.Name}
	if len(params.Arguments) > 0 {
		out.Arguments = params.Arguments
	}
	upToken := ""
	if h.p.Progress {
		upToken = "fulfiller-" + r.ProposalID
		out.SetProgressToken(upToken)
	}
	f.mu.Lock()
	if f.ctx == nil || f.closing {
		f.mu.Unlock()
		return errClosed
	}
	if f.reqs[r.ProposalID] != nil {
		f.mu.Unlock()
		return fmt.Errorf("mcpfront: proposal %s: its request is out already", r.ProposalID)
	}
	rctx, cancel := context.WithCancel(f.ctx)
	// On the upstream's connection itself when it has one (upConn): the
	// call's cancellation then takes it back from there too.
	c := h.u.direct()
	var callID string
	if c != nil {
		callID = c.newID()
		f.reqs[r.ProposalID] = func() { cancel(); f.cancelDirect(c, callID) }
	} else {
		f.reqs[r.ProposalID] = cancel
	}
	if upToken != "" {
		f.tokens[upToken] = h
	}
	f.mu.Unlock()
	forget := func() {
		cancel()
		f.mu.Lock()
		delete(f.tokens, upToken)
		delete(f.reqs, r.ProposalID)
		f.mu.Unlock()
	}
	if c != nil {
		if err := f.sendDirect(c, callID, h, r.ProposalID, out, forget); err == nil {
			return nil
		}
		// Not sent (the connection ended just now): as below, on the
		// session that replaces it.
	}
	started := f.start(func() {
		start := time.Now()
		resp, res := f.send(rctx, h.u, out)
		resp.ProposalID, resp.Latency = r.ProposalID, time.Since(start)
		if res != nil {
			h.mu.Lock()
			h.relayed = &relayedResult{raw: resp.Result, res: res}
			h.mu.Unlock()
		}
		forget()
		if err := f.eng.Responded(f.ctx, resp); err != nil {
			f.log.Warn("mcp response not taken by the engine", "proposal", r.ProposalID, "err", err)
		}
	})
	if !started {
		forget()
		return errClosed
	}
	return nil
}

// send calls the upstream: its result or JSON-RPC error as it came, or
// a result that names the upstream that failed. The result is also
// returned decoded (nil for the others), as the client is to get it.
func (f *Front) send(ctx context.Context, u *upstream, params *mcp.CallToolParams) (Response, *mcp.CallToolResult) {
	// ended is a session the call found closed before it was sent on it.
	var ended *mcp.ClientSession
	for {
		cs, err := u.sessionFor(ctx, ended)
		if err == nil {
			if hc := u.httpFor(cs); hc != nil {
				return hc.call(ctx, params) // posted by the Front itself (uphttp.go)
			}
			var res *mcp.CallToolResult
			res, err = cs.CallTool(ctx, params)
			if ended == nil && errors.Is(err, mcp.ErrConnectionClosed) && ctx.Err() == nil {
				// Not sent: the SDK's client refuses a call on a
				// connection whose reader has ended (a process that
				// just died) before writing it; a call in flight when
				// it ended fails with the read's error instead. So it
				// goes out once, on the session that replaces this
				// one, as a call made a moment later would: "failed
				// during the call" would tell the client it may have
				// run.
				ended = cs
				continue
			}
			if err == nil {
				res = withoutResultType(res)
				raw, merr := json.Marshal(res)
				if merr == nil {
					return Response{Result: raw}, res
				}
				err = fmt.Errorf("its result cannot be relayed: %w", merr)
			} else if werr := (*jsonrpc.Error)(nil); errors.As(err, &werr) && ctx.Err() == nil && isUpstreamRPCError(werr) {
				return Response{Error: &RPCError{Code: werr.Code, Message: werr.Message, Data: werr.Data}}, nil
			}
			switch {
			case ctx.Err() != nil:
				err = fmt.Errorf("upstream %s: the call was cancelled", u.Name)
			default:
				err = fmt.Errorf("upstream %s failed during the call: %w", u.Name, err)
			}
		}
		res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}},
			Meta: mcp.Meta{"fulfiller/upstream": u.Name}}
		raw, _ := json.Marshal(res)
		return Response{Result: raw, Failed: true}, nil
	}
}

// withoutResultType is res without its resultType, which is the hop's
// (fulfiller to the upstream), not the result's: the client's hop sets
// its own. The SDK keeps it unexported, so res is copied field by field
// (TestWithoutResultTypeCopiesEveryField fails when the SDK adds one).
func withoutResultType(res *mcp.CallToolResult) *mcp.CallToolResult {
	return &mcp.CallToolResult{Meta: res.Meta, Content: res.Content, StructuredContent: res.StructuredContent,
		IsError: res.IsError, InputRequests: res.InputRequests, RequestState: res.RequestState}
}

// codeRejected is the SDK's code for a message its transport could not
// deliver (jsonrpc2.ErrRejected): the upstream never answered.
const codeRejected = -32005

// isUpstreamRPCError tells an error the upstream answered from one the
// SDK made of a connection that ended.
func isUpstreamRPCError(e *jsonrpc.Error) bool {
	// The SDK's own for a lost connection are internal errors without
	// data; an upstream's protocol errors (unknown tool, bad params) are
	// answered as they came.
	return e.Code != jsonrpc.CodeInternalError && e.Code != codeRejected || len(e.Data) > 0
}

// SendCancel implements Effects.
func (f *Front) SendCancel(_ context.Context, c Cancel) {
	f.mu.Lock()
	cancel := f.reqs[c.ProposalID]
	f.mu.Unlock()
	if cancel != nil {
		cancel() // the SDK sends notifications/cancelled upstream, or cancelDirect does
	}
}

// Answer implements Effects.
func (f *Front) Answer(_ context.Context, a Answer) error {
	h := f.lookup(a.ProposalID)
	if h == nil {
		return ErrUnknown
	}
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return ErrUnknown
	}
	if h.answered {
		h.mu.Unlock()
		return ErrAnswered
	}
	h.answered = true
	if h.reply != nil && !h.holding && h.ctx.Err() == nil {
		// Written here, on the engine's goroutine: no goroutine holds
		// the call to be woken for it.
		h.holding = true // nothing promotes it any more
		h.mu.Unlock()
		f.answerDirect(h, a)
		return nil
	}
	h.answer <- a
	promote := h.reply != nil && !h.holding
	h.mu.Unlock()
	if promote {
		// The client cancelled or left: its hold withdraws the call.
		f.promote(h)
	}
	return nil
}

// Status implements Effects.
func (f *Front) Status(_ context.Context, s Status) {
	h := f.lookup(s.ProposalID)
	if h == nil {
		return
	}
	f.promote(h) // it waits: held as the SDK's handler would hold it
	if s.Stage == StageEscalated {
		f.noteHeld(h, s.Deadline)
	}
	msg := s.Message
	if msg == "" {
		switch s.Stage {
		case StageEscalated:
			msg = "waiting for approval"
			if len(s.Approvers) > 0 {
				msg += " by " + fmt.Sprint(s.Approvers)
			}
			if !s.Deadline.IsZero() {
				msg += " until " + s.Deadline.UTC().Format(time.RFC3339)
			}
		case StageQueued:
			msg = "allowed, waiting for its turn"
		default:
			msg = "waiting: " + s.Stage
		}
	}
	f.notifyProgress(h, msg)
}

func (f *Front) notifyProgress(h *held, msg string) {
	h.mu.Lock()
	ss, ctx, token := h.ss, h.ctx, h.token
	h.progress++
	n := h.progress
	h.mu.Unlock()
	if token == nil || ctx == nil {
		return // no token, or nobody to tell while a retry is awaited
	}
	if err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg}); err != nil {
		f.log.Debug("mcp progress not sent", "proposal", h.p.ID, "err", err)
	}
}

// progress hands an upstream's progress on to the client whose call it
// is about.
func (f *Front) progress(ctx context.Context, p *mcp.ProgressNotificationParams) {
	tok, _ := p.ProgressToken.(string)
	f.mu.Lock()
	h := f.tokens[tok]
	f.mu.Unlock()
	if h == nil {
		return
	}
	ss, ctx, token := h.handler()
	if token == nil || ctx == nil {
		return
	}
	q := *p
	q.ProgressToken = token
	h.mu.Lock()
	// Progress must increase across ours and the upstream's.
	if q.Progress <= h.progress {
		q.Progress = h.progress + 1
	}
	h.progress = q.Progress
	h.mu.Unlock()
	_ = ss.NotifyProgress(ctx, &q)
}

// SendPrompt implements Effects.
func (f *Front) SendPrompt(_ context.Context, p Prompt) error {
	h := f.lookup(p.ProposalID)
	if h == nil {
		return ErrUnknown
	}
	if !h.p.Elicitation {
		return ErrNoElicitation
	}
	f.promote(h)
	var params mcp.ElicitParams
	if err := json.Unmarshal(p.Params, &params); err != nil {
		return fmt.Errorf("mcpfront: the prompt's params: %w", err)
	}
	if params.Mode == "" {
		params.Mode = "form"
	}
	if params.Mode != "form" {
		return fmt.Errorf("mcpfront: prompt mode %q: fulfiller asks in form mode only", params.Mode)
	}
	if h.mrtr {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.gone {
			return ErrUnknown
		}
		if h.prompts[p.PromptID] != nil {
			return fmt.Errorf("mcpfront: prompt %s is out already", p.PromptID)
		}
		select {
		case h.asks <- p:
		default:
			return fmt.Errorf("mcpfront: too many prompts for one call")
		}
		h.prompts[p.PromptID] = func() {} // answered in the retry, unless cancelled first
		return nil
	}
	ss, hctx, _ := h.handler()
	if hctx == nil {
		return ErrUnknown
	}
	pctx, cancel := context.WithCancel(hctx)
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		cancel()
		return ErrUnknown
	}
	if h.prompts[p.PromptID] != nil {
		h.mu.Unlock()
		cancel()
		return fmt.Errorf("mcpfront: prompt %s is out already", p.PromptID)
	}
	h.prompts[p.PromptID] = cancel
	h.mu.Unlock()
	started := f.start(func() {
		defer cancel()
		res, err := ss.Elicit(pctx, &params)
		h.mu.Lock()
		_, open := h.prompts[p.PromptID]
		delete(h.prompts, p.PromptID)
		h.mu.Unlock()
		if !open || hctx.Err() != nil {
			// Cancelled by the engine, or the client cancelled the call
			// or went away: the Withdrawal tells the engine, and no
			// answer is owed.
			return
		}
		a := PromptAnswer{ProposalID: p.ProposalID, PromptID: p.PromptID}
		switch {
		case err != nil:
			a.Err = fmt.Errorf("the client's elicitation failed: %w", err)
		default:
			a.Result, err = json.Marshal(res)
			if err != nil {
				a.Err = fmt.Errorf("the client's answer cannot be read: %w", err)
			}
		}
		if err := f.eng.Answered(f.ctx, a); err != nil {
			f.log.Warn("mcp prompt answer not taken by the engine", "proposal", p.ProposalID, "err", err)
		}
	})
	if !started {
		h.mu.Lock()
		delete(h.prompts, p.PromptID)
		h.mu.Unlock()
		cancel()
		return errClosed
	}
	return nil
}

// CancelPrompt implements Effects.
func (f *Front) CancelPrompt(_ context.Context, c CancelPrompt) {
	h := f.lookup(c.ProposalID)
	if h == nil {
		return
	}
	h.mu.Lock()
	cancel := h.prompts[c.PromptID]
	delete(h.prompts, c.PromptID)
	h.mu.Unlock()
	if cancel != nil {
		cancel() // the SDK sends notifications/cancelled for the elicitation
	}
}

var _ Effects = (*Front)(nil)

// rejectResult is what a client is told of a refusal.
func rejectResult(r Reject) *mcp.CallToolResult {
	msg := r.Message
	if msg == "" {
		msg = defaultMessages[r.Code]
		if msg == "" {
			msg = "the call was refused"
		}
	}
	return &mcp.CallToolResult{IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("fulfiller refused this call (%s): %s", r.Code, msg)}},
		Meta:    mcp.Meta{"fulfiller/reason": r.Code}}
}

var defaultMessages = map[string]string{
	"policy":    "the policy does not allow this call",
	"disagree":  "the approver declined",
	"timeout":   "no approval came in time",
	"incapable": "this client cannot ask you",
	"busy":      "fulfiller is busy; try again later",
	"other":     "the call was not carried out",
}

// answerResult is the result (or JSON-RPC error) of an Answer to h: the
// upstream's result as send decoded it when the answer relays it as it
// came, else answerResult's.
func (h *held) answerResult(a Answer) (*mcp.CallToolResult, error) {
	h.mu.Lock()
	r := h.relayed
	h.mu.Unlock()
	if r != nil && r.res != nil && a.Reject == nil && a.Error == nil && bytes.Equal(a.Result, r.raw) {
		return r.res, nil
	}
	return answerResult(a)
}

// answerResult is the result (or JSON-RPC error) of an Answer.
func answerResult(a Answer) (*mcp.CallToolResult, error) {
	switch {
	case a.Reject != nil:
		return rejectResult(*a.Reject), nil
	case a.Error != nil:
		return nil, &jsonrpc.Error{Code: a.Error.Code, Message: a.Error.Message, Data: a.Error.Data}
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(a.Result, &res); err != nil {
		return rejectResult(Reject{Code: "other", Message: "the upstream's result cannot be relayed: " + err.Error()}), nil
	}
	return &res, nil
}
