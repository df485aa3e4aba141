// Package loadtest drives the real fulfiller code path with synthetic
// load and measures it from the proposers' side. It backs `fulfiller
// bench` and the flood test.
//
// One Run starts, in this process, an in-process MEW space
// (internal/space), the sample file server as tool owner "fs"
// (internal/toolserver), the fulfiller as `fulfiller run` starts it (the
// same internal/sidecar: agent, policies, store, elicit, grants, fulfill,
// metrics) and N proposers, each its own
// WebSocket participant. The proposers send proposals over loopback and
// watch the space for each one's answer:
//
//   - the answer of a fulfilled proposal is the fulfilment mcp/request whose
//     correlation_id[0] names it (what the reference SDK treats as "your
//     proposal is being carried out"); the tool's mcp/response to that
//     request is measured separately as the tool round trip;
//   - the answer of a rejected proposal is the mcp/reject naming it.
//
// A proposal with no answer when the run ends is unanswered; any answer
// beyond the first for one proposal is a duplicate. Both must be zero.
//
// Load is open-ended only up to a window: at most Config.Window proposals
// are unfinished at once, like agents that wait for their answers. A
// proposal holds its place in the window until the fulfiller is done with
// it: a rejected one until its mcp/reject, a fulfilled one until the tool
// owner's mcp/response (the fulfiller keeps counting it as pending until
// then), so the fulfiller never holds more than Window proposals. The
// in-process space bounds each socket's queue; a flood without a window
// would fill the fulfiller's queue and make the space drop it, which tests
// the fixture, not the fulfiller.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/sidecar"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// Config describes one load run. Zero values take the defaults in
// brackets.
type Config struct {
	Policies []string // --policy paths; required
	Data     []string // --data paths
	// PolicyTimeout [policies.DefaultTimeout] bounds one evaluation, as
	// run's --policy-timeout.
	PolicyTimeout time.Duration

	Proposers int     // [4] proposer participants, each with its own socket
	Proposals int     // [100000] proposals to send in all
	Rate      float64 // proposals per second in all; 0: as fast as the window allows
	Mix       Mix     // [DefaultMix] share of each synthetic kind; ignored with From
	// From, when not empty, replaces the synthetic mix: proposal seq sends
	// From[seq % len(From)].
	From []FileProposal
	// Window is the most proposals unfinished at once [32]: sent and not
	// yet rejected or, when fulfilled, not yet answered by the tool.
	Window int

	// ToolStyle is how the tool owner answers [StyleJSONRPC: echoing
	// JSON-RPC ids]; StyleSDK answers as mew bridge does, with no id.
	ToolStyle toolserver.Style

	MaxPending  int // fulfill.Config.MaxPending [1000]
	MaxInflight int // fulfill.Config.MaxInflight [64]
	// FulfillTimeout is fulfill.Config.FulfillTimeout [30s].
	FulfillTimeout time.Duration

	// StallTimeout ends the run when no proposal was sent or answered for
	// this long while some wait [30s]; those are then unanswered.
	StallTimeout time.Duration
	// Settle is how long to keep watching after the last answer, so that
	// late duplicate answers are counted [300ms].
	Settle time.Duration

	// Progress, when set, gets one line a second while the run goes.
	Progress io.Writer
	// CaptureInputs is how many policy inputs to keep for the OPA
	// comparison (the first ones the fulfiller decides) [0].
	CaptureInputs int

	// State is where the fulfiller keeps pending work, as `run --state`
	// takes it [nil: records in the process's own maps, no NATS
	// (fulfill.Config.Store nil, a state.Local); reported as "none"].
	// A run never reuses a store: with a directory it works in a fresh
	// subdirectory that it removes afterwards; with an external NATS
	// cluster it uses the space "fulfiller-bench" and proposal ids unique
	// to the run.
	State *state.Mode
	// StateCreds is the NATS credentials file for an external State.
	StateCreds string
	// CPUProfile, when set, receives the CPU profile of the measured
	// window (first send to the last answer), labelled by LabelKey.
	CPUProfile io.Writer
	// HeapProfile, when set, receives a heap profile (pprof's "heap",
	// after a garbage collection) taken as the measured window ends, before
	// anything is torn down: what the fulfiller, its store and the rest
	// still hold once every proposal is answered.
	HeapProfile io.Writer
	Logger      *slog.Logger // component logs [discarded]
}

func (c *Config) setDefaults() error {
	if len(c.Policies) == 0 {
		return errors.New("loadtest: no policy given")
	}
	if c.Proposers == 0 {
		c.Proposers = 4
	}
	if c.Proposals == 0 {
		c.Proposals = 100_000
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix
	}
	if c.Window == 0 {
		c.Window = 32
	}
	if c.MaxPending == 0 {
		c.MaxPending = 1000
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = 64
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 300 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Proposers < 1:
		return fmt.Errorf("loadtest: proposers %d: must be at least 1", c.Proposers)
	case c.Proposals < 1:
		return fmt.Errorf("loadtest: proposals %d: must be at least 1", c.Proposals)
	case c.Rate < 0:
		return fmt.Errorf("loadtest: rate %v: must not be negative", c.Rate)
	case c.Window < 1:
		return fmt.Errorf("loadtest: window %d: must be at least 1", c.Window)
	}
	return nil
}

// ErrPolicy wraps the error of a policy or data file that did not load.
var ErrPolicy = errors.New("policy")

// Report is what a run measured.
type Report struct {
	Proposers   int     `json:"proposers"`
	Proposals   int     `json:"proposals"`
	Rate        float64 `json:"rate"` // asked for; 0 = as fast as possible
	Mix         string  `json:"mix"`  // or "file:<n> proposals"
	Window      int     `json:"window"`
	MaxPending  int     `json:"max_pending"`
	MaxInflight int     `json:"max_inflight"`
	Revision    string  `json:"policy_revision"`
	State       string  `json:"state"`      // "memory", the directory or the NATS URLs
	ToolStyle   string  `json:"tool_style"` // how the tool owner answered: jsonrpc or sdk

	SentByKind map[string]int64 `json:"sent_by_kind"`
	Sent       int64            `json:"sent"`
	Answered   int64            `json:"answered"`
	Unanswered int64            `json:"unanswered"` // must be 0
	Duplicates int64            `json:"duplicates"` // answers beyond one per proposal; must be 0
	// DuplicateKinds counts the duplicates by what the extra answer was.
	DuplicateKinds map[string]int64 `json:"duplicate_kinds,omitempty"`
	// FulfilTimeouts counts fulfilled proposals whose tool did not answer
	// within the fulfil timeout, which the fulfiller then rejected
	// "timeout" (docs/design.md rule 4): a slow tool, not a second answer.
	FulfilTimeouts int64 `json:"fulfil_timeouts"`
	// Outcomes counts first answers: "fulfilled" or "rejected:<reason>".
	Outcomes   map[string]int64 `json:"outcomes"`
	ToolErrors int64            `json:"tool_errors"` // fulfilled calls whose tool answered with an error
	// SpoofAttempts counts what the fulfiller caught as spoof attempts
	// (fulfiller_spoof_attempts_total): nobody forges anything here, so
	// any is an honest answer refused.
	SpoofAttempts int64  `json:"spoof_attempts"`
	Stalled       bool   `json:"stalled"` // the run ended by StallTimeout
	SendError     string `json:"send_error,omitempty"`

	Seconds    float64 `json:"seconds"`              // first send to last first answer
	Throughput float64 `json:"proposals_per_second"` // answered / Seconds
	// Latency is from just before the proposer sends a proposal to the
	// proposer seeing its answer (the fulfilment mcp/request or the
	// mcp/reject).
	Latency Percentiles `json:"latency"`
	// ToolRoundTrip is, for fulfilled proposals, from sending to seeing
	// the tool owner's mcp/response (what an SDK proposer waits for).
	ToolRoundTrip Percentiles `json:"tool_round_trip"`

	// CPUSeconds is the CPU time of the whole process (space, tool,
	// fulfiller, proposers) from the first send to the end of the run;
	// CPUPerProposal divides it by the answered proposals.
	CPUSeconds     float64 `json:"cpu_seconds"`
	CPUPerProposal float64 `json:"cpu_us_per_proposal"`
	// CPUShare is each component's share of the CPU profile of the same
	// window, by the goroutine label LabelKey (Component* values; shares
	// add up to 1). FulfillerCPUPerProposal is the fulfiller's share of
	// CPUPerProposal: the cost of the fulfiller itself (its socket, its
	// decisions, its store), apart from the space, tool and proposers that
	// share the process. ProfileError says why they are missing (another
	// CPU profile was running, e.g. go test -cpuprofile).
	CPUShare                map[string]float64 `json:"cpu_share,omitempty"`
	FulfillerCPUPerProposal float64            `json:"fulfiller_cpu_us_per_proposal"`
	// FulfillerCPUProRata adds to FulfillerCPUPerProposal the
	// fulfiller's pro-rata part of ComponentOther (mostly GC background
	// marking, which no goroutine label reaches): the labelled share
	// among the labelled components, times CPUPerProposal. The truth lies
	// between the two figures.
	FulfillerCPUProRata float64 `json:"fulfiller_cpu_us_per_proposal_pro_rata"`
	// ProfiledCPUSeconds is the CPU time the profile's samples account
	// for. On a busy machine it falls well short of CPUSeconds (about half
	// at load average 6); the shares assume the loss falls evenly on every
	// component.
	ProfiledCPUSeconds float64 `json:"profiled_cpu_seconds,omitempty"`
	ProfileError       string  `json:"profile_error,omitempty"`
	// HandoffsPerProposal is how many times the fulfiller's work
	// crossed between goroutines (lifecycle.Loop.Handoffs) in the same
	// window, per proposal read: the engine's overhead beside the
	// decision itself (issue 39 asks at most 8).
	HandoffsPerProposal float64 `json:"handoffs_per_proposal,omitempty"`
	// HeapProfileError says why Config.HeapProfile got no profile.
	HeapProfileError string `json:"heap_profile_error,omitempty"`

	// StoreOps is the latency of each kind of state store operation in
	// the run (claim, put, update, sync, delete, …): successful ones, from
	// the first send to the end. Nil without a store.
	StoreOps map[string]Percentiles `json:"store_ops,omitempty"`

	PeakRSS uint64 `json:"peak_rss_bytes"` // VmHWM of the whole process (space, tool, fulfiller, proposers)
	// MemoryLimit is the Go runtime's soft memory limit during the run
	// (GOMEMLIMIT, bench --memory-limit); 0 for none. It decides how
	// much garbage the heap may hold, and so the peak RSS.
	MemoryLimit int64  `json:"memory_limit_bytes,omitempty"`
	PeakHeap    uint64 `json:"peak_heap_bytes"` // largest sampled live heap (every 50ms)

	OPA *Comparison `json:"vs_opa_server,omitempty"`
}

// OK reports whether every proposal was sent and answered exactly once.
func (r *Report) OK() bool {
	return r.Unanswered == 0 && r.Duplicates == 0 && r.SpoofAttempts == 0 && r.SendError == "" && r.Sent == int64(r.Proposals)
}

// Result is a Report plus what a comparison needs afterwards.
type Result struct {
	Report Report
	// Inputs are the first Config.CaptureInputs policy inputs the
	// fulfiller decided, exactly as the engine saw them.
	Inputs []*policies.Input
	// Engine is the loaded policy, still usable after Run.
	Engine *policies.Engine
}

// Capabilities as a space.yaml would grant them (see internal/demo).
var (
	capsFulfiller = []agent.Capability{{Kind: "mcp/*"}, {Kind: "chat"}}
	capsProposer  = []agent.Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}}
	capsTool      = []agent.Capability{{Kind: "mcp/response"}, {Kind: "chat"}}
)

// Run performs one load run. It returns an error when the run could not
// be set up; a run that left proposals unanswered returns a Report whose
// OK is false and a nil error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	w, err := startWorld(ctx, cfg)
	if err != nil {
		return nil, err
	}
	engine := w.sidecar.Policy()
	rep := w.drive(ctx)
	w.stop()
	rep.Revision = engine.Revision()
	rep.State = "none"
	if cfg.State != nil {
		rep.State = cfg.State.String()
	}
	rep.ToolStyle = cfg.ToolStyle.String()
	rep.SpoofAttempts = w.spoofs.Load()
	rep.PeakRSS = peakRSS()
	rep.MemoryLimit = memoryLimit()
	return &Result{Report: rep, Inputs: w.capture.inputs(), Engine: engine}, nil
}

// world is everything one run starts; stop tears it down in reverse.
type world struct {
	cfg       Config
	srv       *space.Server
	proposers []*wireProposer
	capture   *inputCapture
	storeOps  *storeOps // the store's operations, when the run has one
	sidecar   *sidecar.Sidecar
	cleanups  []func()
	// idBase starts every proposal id: "bench-", or "bench-<nonce>-"
	// where the store outlives the run and remembers ids as seen.
	idBase string
	spoofs atomic.Int64 // spoof attempts the fulfiller caught
}

func (w *world) defer_(f func()) { w.cleanups = append(w.cleanups, f) }

// observeSpoof counts the fulfiller's spoof attempts as its metrics do.
func (w *world) observeSpoof(e fulfill.Event) {
	if e.SpoofKind() != "" {
		w.spoofs.Add(1)
	}
}

func (w *world) stop() {
	for _, f := range slices.Backward(w.cleanups) {
		f()
	}
	w.cleanups = nil
}

func startWorld(ctx context.Context, cfg Config) (w *world, err error) {
	w = &world{cfg: cfg, capture: &inputCapture{max: cfg.CaptureInputs}, storeOps: newStoreOps(), idBase: "bench-"}
	// Not w: every failure returns a nil w.
	started := w
	defer func() {
		if err != nil {
			started.stop()
		}
	}()
	// Every component starts under its own pprof label, which the
	// goroutines it starts inherit, so the run's CPU profile tells the
	// fulfiller's CPU from the rest of the process's (Report.CPUShare).
	var srv *space.Server
	// Room in every socket's queue for every frame the window allows
	// (a proposal makes at most four: itself, request, response; or
	// reject and chat), so the space never has to wait for a reader.
	labelled(ctx, ComponentSpace, func(context.Context) {
		srv, err = space.New(space.Config{
			Logger:            cfg.Logger,
			QueueSize:         4*cfg.Window + 1024,
			SlowClientTimeout: 30 * time.Second,
			Tokens: map[string][]agent.Capability{
				"fulfiller-token": capsFulfiller,
				"proposer-token":  capsProposer,
				"tool-token":      capsTool,
			},
		})
	})
	if err != nil {
		return nil, fmt.Errorf("loadtest: start space: %w", err)
	}
	w.srv = srv
	w.defer_(func() { _ = srv.Close() })

	join := func(id, token, component string) (c *agent.Client, err error) {
		labelled(ctx, component, func(context.Context) {
			c, err = agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: id, Token: token, Logger: cfg.Logger})
		})
		if err != nil {
			return nil, fmt.Errorf("loadtest: %s joins: %w", id, err)
		}
		w.defer_(func() { _ = c.Close() })
		return c, nil
	}

	// The tool owner.
	tc, err := join("fs", "tool-token", ComponentTool)
	if err != nil {
		return nil, err
	}
	files := toolserver.NewFiles(map[string]string{
		"/srv/app/config.yaml": "listen: :8080\nlog: info\n",
		"/srv/app/README.md":   "# app\n", // read by examples/proposals/read.json
	})
	tsub := tc.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindRequest}, Buffer: 4096})
	tctx, stopTool := context.WithCancel(context.WithoutCancel(ctx))
	tdone := make(chan struct{})
	labelled(ctx, ComponentTool, func(context.Context) {
		ts := toolserver.New(tc, cfg.Logger, files.Tools()...)
		ts.SetStyle(cfg.ToolStyle)
		go func() { defer close(tdone); _ = ts.Serve(tctx, tsub.C()) }()
	})
	w.defer_(func() { stopTool(); <-tdone; tsub.Close() })

	// The fulfiller: `fulfiller run`'s sidecar, built by the same package
	// (internal/sidecar), joined to the in-process space.
	sc, err := w.newSidecar(srv.URL())
	if err != nil {
		return nil, err
	}
	labelled(ctx, ComponentFulfiller, func(lctx context.Context) { err = sc.Start(lctx) })
	if err != nil {
		var se *sidecar.StartError
		if errors.As(err, &se) && se.Part == sidecar.PartPolicy {
			return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
		}
		if errors.As(err, &se) && se.Part == sidecar.PartState {
			return nil, fmt.Errorf("loadtest: open state %s: %w", cfg.State, err)
		}
		return nil, fmt.Errorf("loadtest: start the fulfiller: %w", err)
	}
	w.sidecar = sc
	w.defer_(func() { _ = sc.Stop() })
	ful := sc.Fulfiller()

	if err := waitTool(ctx, ful, "read_file"); err != nil {
		return nil, err
	}

	for i := range cfg.Proposers {
		var p *wireProposer
		labelled(ctx, ComponentProposers, func(context.Context) {
			p, err = dialProposer(ctx, srv.URL(), "bench-"+strconv.Itoa(i), "proposer-token", cfg.StallTimeout)
		})
		if err != nil {
			return nil, err
		}
		w.proposers = append(w.proposers, p)
		w.defer_(p.close)
	}
	return w, nil
}

// benchSpace is the space of the state buckets on an external NATS
// cluster: one set of buckets for every bench run, apart from any real
// fulfiller's.
const benchSpace = "fulfiller-bench"

// newSidecar configures the run's fulfiller. Its store is the run's
// own: a directory store lives in a fresh subdirectory, removed when the
// run stops, so that no run resumes (or is refused as seen) the
// proposals of an earlier one; on an external cluster the buckets stay,
// in a space of their own, and the proposal ids carry a nonce instead.
func (w *world) newSidecar(url string) (*sidecar.Sidecar, error) {
	cfg := w.cfg
	sc := sidecar.Config{
		Gateway: url, Space: space.DefaultSpaceID, Token: "fulfiller-token", ID: "fulfiller",
		Policy: policies.Options{Policies: cfg.Policies, Data: cfg.Data, Timeout: cfg.PolicyTimeout},
		Fulfill: fulfill.Config{
			MaxPending:     cfg.MaxPending,
			MaxInflight:    cfg.MaxInflight,
			FulfillTimeout: cfg.FulfillTimeout,
			// As run's --status-chats (on by default): a proposal that
			// waits for a fulfilment slot is told so, which is a frame
			// the space relays to every participant.
			StatusChats: true,
		},
		Observer: fulfill.Observers{w.capture, fulfill.ObserverFunc(w.observeSpoof)},
		Logger:   cfg.Logger,
	}
	if cfg.State != nil {
		mode := *cfg.State
		st := &sidecar.StateConfig{Mode: mode, Creds: cfg.StateCreds, Observer: w.storeOps}
		switch mode.Kind {
		case state.Dir:
			if err := os.MkdirAll(mode.Dir, 0o700); err != nil {
				return nil, fmt.Errorf("loadtest: state directory: %w", err)
			}
			dir, err := os.MkdirTemp(mode.Dir, "bench-state-")
			if err != nil {
				return nil, fmt.Errorf("loadtest: state directory: %w", err)
			}
			w.defer_(func() { _ = os.RemoveAll(dir) })
			st.Mode.Dir = dir
		case state.External:
			st.Space = benchSpace
			w.idBase = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
		}
		sc.State = st
	}
	return sidecar.New(sc)
}

// waitTool waits until the fulfiller has discovered the tool owner, so
// that the first proposals are not rejected incapable.
func waitTool(ctx context.Context, ful *fulfill.Fulfiller, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		for _, t := range ful.Tools() {
			if t.Name == name {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loadtest: the fulfiller did not discover tool %s: %w", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// inputCapture keeps the first policy inputs the fulfiller decides. It is
// a fulfill.Observer, called on the hot path: after the first max inputs
// it costs one atomic load.
type inputCapture struct {
	max  int
	full atomic.Bool
	mu   sync.Mutex
	ins  []*policies.Input
}

func (c *inputCapture) Observe(e fulfill.Event) {
	if e.Stage != fulfill.StageDecided || e.Input == nil || c.full.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ins) >= c.max {
		c.full.Store(true)
		return
	}
	c.ins = append(c.ins, e.Input)
}

func (c *inputCapture) inputs() []*policies.Input {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ins)
}

// tracker is the shared state of one run, indexed by proposal sequence
// number. It is small per proposal (12 bytes), so a million-proposal
// flood measures the fulfiller's memory, not the generator's.
type tracker struct {
	start    time.Time
	sent     []atomic.Int64 // ns since start + 1; 0: not sent
	answers  []atomic.Int32
	released []atomic.Bool // seq has given its place in the window back
	window   chan struct{}

	nSent, nAnswered, nDup atomic.Int64
	lastAnswer             atomic.Int64 // ns since start
}

// now is the time since the start, in ns.
func (t *tracker) now() int64 { return int64(time.Since(t.start)) }

// answered records an answer to seq seen at ns since start. It returns
// the latency for the first answer, and ok false for a duplicate or an
// answer to a proposal this run did not send.
func (t *tracker) answered(seq int, ns int64) (lat int64, ok bool) {
	if seq < 0 || seq >= len(t.sent) {
		return 0, false
	}
	sent := t.sent[seq].Load()
	if sent == 0 {
		return 0, false
	}
	if t.answers[seq].Add(1) > 1 {
		t.nDup.Add(1)
		return 0, false
	}
	t.nAnswered.Add(1)
	for {
		old := t.lastAnswer.Load()
		if ns <= old || t.lastAnswer.CompareAndSwap(old, ns) {
			break
		}
	}
	return ns - (sent - 1), true
}

// release gives seq's place in the window back, once: the fulfiller is
// done with it (rejected, or fulfilled and answered by the tool).
func (t *tracker) release(seq int) {
	if seq < 0 || seq >= len(t.sent) || t.sent[seq].Load() == 0 {
		return
	}
	if t.released[seq].CompareAndSwap(false, true) {
		<-t.window
	}
}

// receiver is one proposer's view of the space; only its goroutine
// touches it until that goroutine has ended.
type receiver struct {
	prefix     string
	lat        histogram // sent → answer
	toolLat    histogram // sent → tool's response, fulfilled proposals
	outcomes   map[string]int64
	requests   map[string]int // fulfilment request envelope id → seq
	fulfilling map[int]string // seq → its fulfilment request's envelope id, until the tool answers
	toolErrors int64
	// fulfilTimeouts counts fulfilled proposals then rejected timeout;
	// dups the answers beyond the first, by what they were.
	fulfilTimeouts int64
	dups           map[string]int64
}

// duplicate records an answer to a proposal already answered.
func (r *receiver) duplicate(kind string) {
	if r.dups == nil {
		r.dups = map[string]int64{}
	}
	r.dups[kind]++
}

// payload is what proposal seq proposes.
func (w *world) payload(seq int, sched []Kind) (Kind, []string, json.RawMessage) {
	if len(w.cfg.From) > 0 {
		p := w.cfg.From[seq%len(w.cfg.From)]
		return KindFile, p.To, p.Payload
	}
	k := sched[seq%len(sched)]
	return k, nil, synthetic[k]
}

// drive sends the proposals and waits for their answers.
func (w *world) drive(ctx context.Context) Report {
	cfg := w.cfg
	n := cfg.Proposals
	t := &tracker{
		sent:     make([]atomic.Int64, n),
		answers:  make([]atomic.Int32, n),
		released: make([]atomic.Bool, n),
		window:   make(chan struct{}, cfg.Window),
	}
	sched := cfg.Mix.schedule()
	rep := Report{Proposers: cfg.Proposers, Proposals: n, Rate: cfg.Rate, Mix: cfg.Mix.String(),
		Window: cfg.Window, MaxPending: cfg.MaxPending, MaxInflight: cfg.MaxInflight,
		SentByKind: map[string]int64{}, Outcomes: map[string]int64{}}
	if len(cfg.From) > 0 {
		rep.Mix = fmt.Sprintf("file: %d proposals", len(cfg.From))
	}
	heap := startHeapSampler(ctx, 50*time.Millisecond)
	// The profile covers the same window as the CPU time, so that the
	// components' shares of it apply to that time.
	var prof bytes.Buffer
	profErr := pprof.StartCPUProfile(&prof)
	cpu0 := cpuTime()
	hand0, props0 := w.sidecar.Fulfiller().Handoffs()
	w.storeOps.reset()
	t.start = time.Now()

	receivers := make([]*receiver, len(w.proposers))
	var rwg sync.WaitGroup
	for i := range w.proposers {
		r := &receiver{prefix: w.idBase + strconv.Itoa(i) + "-p", outcomes: map[string]int64{}, requests: map[string]int{}, fulfilling: map[int]string{}}
		receivers[i] = r
		rwg.Add(1)
		labelled(ctx, ComponentProposers, func(context.Context) {
			go func() { defer rwg.Done(); w.proposers[i].run(t, r) }()
		})
	}

	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	var sendErr atomic.Pointer[error]
	sentByKind := make([][numKinds]int64, len(w.proposers))
	var swg sync.WaitGroup
	for i, p := range w.proposers {
		prefix := w.idBase + strconv.Itoa(i) + "-p"
		swg.Add(1)
		labelled(ctx, ComponentProposers, func(context.Context) {
			go func() {
				defer swg.Done()
				for seq := i; seq < n; seq += len(w.proposers) {
					select {
					case t.window <- struct{}{}:
					case <-sendCtx.Done():
						return
					}
					if cfg.Rate > 0 {
						due := time.Duration(float64(seq) / cfg.Rate * float64(time.Second))
						if d := due - time.Since(t.start); d > 0 {
							select {
							case <-time.After(d):
							case <-sendCtx.Done():
								<-t.window
								return
							}
						}
					}
					kind, to, payload := w.payload(seq, sched)
					t.sent[seq].Store(int64(time.Since(t.start)) + 1)
					if err := p.propose(prefix+strconv.Itoa(seq), to, payload); err != nil {
						t.sent[seq].Store(0)
						<-t.window
						if sendCtx.Err() == nil {
							err = fmt.Errorf("proposer %s: %w", p.id, err)
							sendErr.CompareAndSwap(nil, &err)
							stopSending()
						}
						return
					}
					t.nSent.Add(1)
					sentByKind[i][kind]++
				}
			}()
		})
	}
	sendersDone := make(chan struct{})
	go func() { swg.Wait(); close(sendersDone) }()

	var pwg sync.WaitGroup
	progressDone := make(chan struct{})
	if cfg.Progress != nil {
		pwg.Add(1)
		go func() { defer pwg.Done(); progress(cfg.Progress, t, progressDone) }()
	}

	// Wait until everything sent is answered, the run stalls, or ctx ends.
	tick := time.NewTicker(5 * time.Millisecond)
	lastSent, lastAnswered, lastMove := int64(-1), int64(-1), time.Now()
	finished := false
	for !finished {
		select {
		case <-ctx.Done():
			finished = true
			continue
		case <-tick.C:
		}
		s, a := t.nSent.Load(), t.nAnswered.Load()
		select {
		case <-sendersDone:
			if a >= s {
				finished = true
				continue
			}
		default:
		}
		if s != lastSent || a != lastAnswered {
			lastSent, lastAnswered, lastMove = s, a, time.Now()
		} else if time.Since(lastMove) > cfg.StallTimeout {
			rep.Stalled = true
			finished = true
		}
	}
	tick.Stop()
	cpu := cpuTime() - cpu0
	if profErr == nil {
		pprof.StopCPUProfile()
	}
	if hand, props := w.sidecar.Fulfiller().Handoffs(); props > props0 {
		rep.HandoffsPerProposal = float64(hand-hand0) / float64(props-props0)
	}
	if cfg.HeapProfile != nil {
		// After the CPU time and profile, so that the collection it
		// forces is not counted.
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(cfg.HeapProfile, 0); err != nil {
			rep.HeapProfileError = err.Error()
		}
	}
	stopSending()
	<-sendersDone
	if ctx.Err() == nil {
		// Late duplicates would show up now.
		select {
		case <-time.After(cfg.Settle):
		case <-ctx.Done():
		}
	}
	close(progressDone)
	pwg.Wait()
	// Closing the sockets ends the receivers; then they have seen all
	// they will see.
	for _, p := range w.proposers {
		p.close()
	}
	rwg.Wait()
	rep.PeakHeap = heap.Close()

	var lat, toolLat histogram
	for _, r := range receivers {
		lat.merge(&r.lat)
		toolLat.merge(&r.toolLat)
		for k, v := range r.outcomes {
			rep.Outcomes[k] += v
		}
		rep.ToolErrors += r.toolErrors
		rep.FulfilTimeouts += r.fulfilTimeouts
		for k, v := range r.dups {
			if rep.DuplicateKinds == nil {
				rep.DuplicateKinds = map[string]int64{}
			}
			rep.DuplicateKinds[k] += v
		}
	}
	for _, byKind := range sentByKind {
		for k, v := range byKind {
			if v > 0 {
				rep.SentByKind[Kind(k).String()] += v
			}
		}
	}
	rep.Sent, rep.Answered, rep.Duplicates = t.nSent.Load(), t.nAnswered.Load(), t.nDup.Load()
	rep.Unanswered = rep.Sent - rep.Answered
	if p := sendErr.Load(); p != nil {
		rep.SendError = (*p).Error()
	}
	rep.Seconds = time.Duration(t.lastAnswer.Load()).Seconds()
	if rep.Seconds > 0 {
		rep.Throughput = float64(rep.Answered) / rep.Seconds
	}
	rep.CPUSeconds = cpu.Seconds()
	if rep.Answered > 0 {
		rep.CPUPerProposal = float64(cpu.Microseconds()) / float64(rep.Answered)
	}
	rep.Latency = lat.percentiles()
	rep.ToolRoundTrip = toolLat.percentiles()
	rep.StoreOps = w.storeOps.percentiles()
	if profErr == nil {
		profErr = w.cpuShares(&rep, prof.Bytes())
	}
	if profErr != nil {
		rep.ProfileError = profErr.Error()
	}
	return rep
}

// cpuShares fills the report's CPU shares from the window's profile and
// hands the profile to Config.CPUProfile.
func (w *world) cpuShares(rep *Report, prof []byte) error {
	if w.cfg.CPUProfile != nil {
		if _, err := w.cfg.CPUProfile.Write(prof); err != nil {
			return fmt.Errorf("write cpu profile: %w", err)
		}
	}
	sums, err := cpuByLabel(prof, LabelKey)
	if err != nil {
		return err
	}
	var total int64
	for _, v := range sums {
		total += v
	}
	if total == 0 {
		return errors.New("cpu profile: no samples")
	}
	rep.CPUShare = map[string]float64{}
	for k, v := range sums {
		if k == "" {
			k = ComponentOther
		}
		rep.CPUShare[k] += float64(v) / float64(total)
	}
	rep.ProfiledCPUSeconds = time.Duration(total).Seconds()
	rep.FulfillerCPUPerProposal = rep.CPUShare[ComponentFulfiller] * rep.CPUPerProposal
	if labelledShare := 1 - rep.CPUShare[ComponentOther]; labelledShare > 0 {
		rep.FulfillerCPUProRata = rep.FulfillerCPUPerProposal / labelledShare
	}
	return nil
}

// progress prints one line a second until done closes.
func progress(out io.Writer, t *tracker, done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev int64
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		s, a := t.nSent.Load(), t.nAnswered.Load()
		fmt.Fprintf(out, "bench: %6.1fs  sent %d  answered %d  waiting %d  %d/s  heap %s\n",
			time.Since(t.start).Seconds(), s, a, s-a, a-prev, mib(heapNow()))
		prev = a
	}
}
