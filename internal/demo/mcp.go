package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/examples"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// MCPOptions configure demo --mcp (RunMCP).
type MCPOptions struct {
	Out    io.Writer    // narration; default os.Stdout
	Color  bool         // ANSI colours in the narration
	Logger *slog.Logger // component logs; default: discarded
	// Step is how long one call may take, the person's answer included
	// [10s].
	Step time.Duration
	// Approver, when set, is the person at the client: each elicitation
	// is shown with this UI (the approve card), and the steps that ask
	// accept whatever they decide. Nil: the demo's client answers as the
	// person would.
	Approver approver.UI
	// DecisionLog is where the decision log goes ("": a file in the
	// demo's temporary directory, removed at the end).
	DecisionLog string
	// PolicyTimeout bounds one evaluation [1s, as the MEW demo's].
	PolicyTimeout time.Duration
	// Version is fulfiller's, in the clientInfo the server sees.
	Version string
}

// The demo's working tree: what the coding agent works on.
var mcpTree = map[string]string{
	"README.md":     "# myapp\nA small web app. Build with make.\n",
	"main.go":       "package main\n\nfunc main() { serve() }\n",
	".env":          "DATABASE_URL=postgres://app:hunter2@db/app\n",
	"build/old.log": "12:00 build ok\n",
	"src/serve.go":  "package main\n\nfunc serve() {}\n",
}

// mcpStep is one thing the coding agent does, and how the starter policy
// says it ends.
type mcpStep struct {
	title string
	// tool and args are the call (tools/list when tool is "").
	tool string
	args map[string]any
	// action is the policy's decision (fulfill, reject, escalate); want
	// how the call ends: fulfilled, or rejected:<reason>.
	action, want string
	// answer is how the demo's client answers the elicitation, as the
	// person would; yours the title when the person answers.
	answer *approver.Answer
	yours  string
	// rugPull: before the call, the server redefines read_text_file and
	// the agent lists the tools again, as a client does when told.
	rugPull bool
}

func mcpScript(tree string) []mcpStep {
	path := func(p string) map[string]any { return map[string]any{"path": filepath.Join(tree, p)} }
	return []mcpStep{
		{title: "the agent lists the tools: tools/list passes through, each definition pinned", want: "listed"},
		{title: "a read inside the working tree runs", tool: "read_text_file", args: path("README.md"), action: "fulfill", want: "fulfilled"},
		{title: "a write inside the working tree runs", tool: "write_file", args: map[string]any{"path": filepath.Join(tree, "NOTES.md"), "content": "- serve() needs a port\n"}, action: "fulfill", want: "fulfilled"},
		{title: "reading .env is refused: a secret, whatever the tree", tool: "read_text_file", args: path(".env"), action: "reject", want: "rejected:policy"},
		{title: "a delete asks you (@caller): you approve", tool: "delete_file", args: path("build/old.log"), action: "escalate", want: "fulfilled",
			answer: &approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: "old build output; make writes it again"},
			yours:  "a delete asks you (@caller): you decide"},
		{title: "another delete asks you: you decline", tool: "delete_file", args: path("src"), action: "escalate", want: "rejected:disagree",
			answer: &approver.Answer{Action: approval.ActionAccept, Reason: "src is the source code: keep it"},
			yours:  "another delete asks you: you decide"},
		{title: "the server redefines read_text_file (a rug pull): the next read asks you, and you decline", tool: "read_text_file", args: path("README.md"), action: "escalate", want: "rejected:disagree", rugPull: true,
			answer: &approver.Answer{Action: approval.ActionDecline},
			yours:  "the server redefines read_text_file (a rug pull): the next read asks you"},
	}
}

// RunMCP plays the story of `fulfiller mcp`: a go-sdk client plays the
// coding agent, in front of a filesystem server over a temporary working
// tree, with the real front end (internal/mcpserve, the starter policy of
// examples/mcp) between them, all in process over in-memory transports.
// It returns nil when every step ended as the starter policy says.
func RunMCP(ctx context.Context, opts MCPOptions) (err error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Step <= 0 {
		opts.Step = 10 * time.Second
	}
	if opts.PolicyTimeout <= 0 {
		opts.PolicyTimeout = time.Second
	}
	dir, err := os.MkdirTemp("", "fulfiller-demo-mcp-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	// The policy compares paths as written: the tree's real path (macOS's
	// /var is /private/var), as fulfiller mcp init writes it.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	tree := filepath.Join(dir, "myapp")
	for name, content := range mcpTree {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	policyDir, dataFile, err := examples.WriteMCP(dir, []string{tree}, dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	logPath := opts.DecisionLog
	if logPath == "" {
		logPath = filepath.Join(dir, "decisions.jsonl")
	}

	// The filesystem server: one go-sdk server, a session per start of
	// the upstream (fulfiller restarts an upstream that ends), each on an
	// in-memory transport. Its sessions end with fulfiller's side of
	// them, and are waited for before the directory goes.
	server := toolserver.NewMCP(&mcp.Implementation{Name: "fs", Version: "1.0.0"}, fsTools(tree)...)
	var sessions sync.WaitGroup
	defer sessions.Wait()
	up := mcpfront.Upstream{Name: "fs", What: "the demo's filesystem server (in process)", Transport: func() (mcp.Transport, error) {
		client, side := mcp.NewInMemoryTransports()
		ss, err := server.Connect(ctx, side, nil)
		if err != nil {
			return nil, err
		}
		sessions.Add(1)
		go func() { defer sessions.Done(); _ = ss.Wait() }()
		return client, nil
	}}
	n := newMCPNarrator(opts.Out, opts.Color, logPath)
	n.log.skipExisting()
	srv, err := mcpserve.Start(ctx, mcpserve.Config{
		Upstreams: []mcpfront.Upstream{up},
		Policy:    policies.Options{Policies: []string{policyDir}, Data: []string{dataFile}, Timeout: opts.PolicyTimeout, Logger: opts.Logger},
		State:     state.Mode{Kind: state.Memory}, DecisionLog: logPath, ClientID: "local",
		Version: opts.Version, Logger: opts.Logger,
	})
	if err != nil {
		return fmt.Errorf("demo: start fulfiller mcp: %w", err)
	}
	closed := false
	closeServer := func() error {
		if closed {
			return nil
		}
		closed = true
		return srv.Close()
	}
	defer func() {
		if cerr := closeServer(); err == nil && cerr != nil {
			err = fmt.Errorf("demo: fulfiller mcp: %w", cerr)
		}
	}()

	agentSide, frontSide := mcp.NewInMemoryTransports()
	sctx, stopServe := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.ServeStdio(sctx, "fs", frontSide)
	}()
	defer func() { stopServe(); <-served }()

	listChanged := make(chan struct{}, 1)
	stopped := make(chan struct{})
	var stopOnce sync.Once
	h := &callerHand{n: n, ui: opts.Approver, stop: func() { stopOnce.Do(func() { close(stopped) }) }}
	client := mcp.NewClient(&mcp.Implementation{Name: "coding-agent", Version: "1.0"}, &mcp.ClientOptions{
		ElicitationHandler: h.elicit,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case listChanged <- struct{}{}:
			default:
			}
		},
	})
	cctx, cancel := context.WithTimeout(ctx, opts.Step)
	cs, err := client.Connect(cctx, agentSide, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("demo: the agent's client connects to fulfiller mcp: %w", err)
	}
	defer cs.Close()

	version := ""
	if r := cs.InitializeResult(); r != nil {
		version = r.ProtocolVersion
	}
	n.header(tree, version, opts.Approver != nil)
	var results []mcpResult
	for i, s := range mcpScript(tree) {
		if ctx.Err() != nil {
			break
		}
		if opts.Approver != nil && s.answer != nil {
			s.want, s.title = wantHuman, s.yours
		}
		if s.rugPull {
			toolserver.AddMCP(server, rugPulled(tree))
			n.note("the fs server redefines read_text_file under you: its description now asks the model for ~/.ssh/id_ed25519.\n" +
				"     fulfiller hears notifications/tools/list_changed, lists fs's tools again (read_text_file no longer matches its pin) and tells the agent's client")
			wait, cancel := context.WithTimeout(ctx, opts.Step)
			select {
			case <-listChanged:
			case <-wait.Done():
			}
			cancel()
		}
		h.set(s.answer)
		r := n.play(ctx, i+1, s, cs, opts.Step)
		results = append(results, r)
		select {
		case <-stopped:
			n.note(fmt.Sprintf("stopped after %d of %d steps", len(results), len(mcpScript(tree))))
			return ErrStopped
		default:
		}
	}
	if ctx.Err() != nil {
		n.note(fmt.Sprintf("stopped after %d of %d steps", max(len(results)-1, 0), len(mcpScript(tree))))
		return ErrStopped
	}
	// The log is complete once fulfiller mcp has closed: every outcome,
	// written before the answer or after it, is on disk.
	_ = cs.Close()
	stopServe()
	<-served
	if err := closeServer(); err != nil {
		return fmt.Errorf("demo: fulfiller mcp: %w", err)
	}
	n.summary(results)
	lines, err := n.log.all()
	if err != nil {
		return fmt.Errorf("demo: the decision log: %w", err)
	}
	n.decisionLog(lines, opts.DecisionLog)
	var failed []string
	for _, r := range results {
		if !r.ok {
			failed = append(failed, fmt.Sprintf("step %d (%s): want %s, got %s", r.n, r.step.title, r.step.want, r.got))
		}
	}
	if len(failed) > 0 {
		return errors.New("demo: " + strings.Join(failed, "; "))
	}
	return nil
}

// callerHand is the person at the client: it answers the elicitations
// fulfiller sends the agent's client, as the step says or through the
// person's UI.
type callerHand struct {
	n    *mcpNarrator
	ui   approver.UI
	stop func()

	mu     sync.Mutex
	answer *approver.Answer
	asked  int
}

func (h *callerHand) set(a *approver.Answer) {
	h.mu.Lock()
	h.answer = a
	h.mu.Unlock()
}

// elicit is the client's ElicitationHandler: the request read as the
// approve card reads a MEW elicitation, shown, and answered.
func (h *callerHand) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	h.mu.Lock()
	h.asked++
	id := h.asked
	scripted := h.answer
	h.mu.Unlock()
	params, err := json.Marshal(req.Params)
	if err != nil {
		return nil, err
	}
	payload, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": agent.MethodElicitationCreate, "params": json.RawMessage(params)})
	if err != nil {
		return nil, err
	}
	card, err := approver.ParseCard(agent.Envelope{ID: fmt.Sprintf("elicitation-%d", id), From: "fulfiller", Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("demo: the elicitation is no approval card: %w", err)
	}
	proposal := ""
	if card.Proposal != nil {
		proposal = card.Proposal.ID
	}
	h.n.asked(proposal)
	var a approver.Answer
	switch {
	case h.ui != nil:
		if a, err = h.ui.Ask(ctx, card); err != nil {
			if errors.Is(err, approver.ErrQuit) {
				h.stop()
			}
			return nil, err
		}
	case scripted != nil:
		h.n.card(card)
		a = *scripted
	default:
		h.n.card(card)
		a = approver.Answer{Action: approval.ActionCancel}
	}
	h.n.answered(a)
	env, err := approver.Response(card, a, nil)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Result mcp.ElicitResult `json:"result"`
	}
	if err := json.Unmarshal(env.Payload, &resp); err != nil {
		return nil, err
	}
	return &resp.Result, nil
}
