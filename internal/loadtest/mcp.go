package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// MCP transports the MCP bench runs over (MCPConfig.Transport).
const (
	// MCPStdio is `fulfiller mcp -- COMMAND`: one client on OS pipes to
	// the front end, the tool server a child process on its stdio.
	MCPStdio = "stdio"
	// MCPHTTP is `fulfiller mcp serve`: clients over loopback Streamable
	// HTTP, the tool server on loopback Streamable HTTP too.
	MCPHTTP = "http"
)

// ComponentClients labels the MCP bench's clients (direct and proxied)
// in its CPU profile, as ComponentProposers does the MEW bench's.
const ComponentClients = "clients"

// MCPServerName is the bench upstream's NAME (tool.server in the policy
// input); MCPTool is the tool every call calls: the in-repo calculator's
// add, read-only.
const (
	MCPServerName = "calc"
	MCPTool       = "add"
)

// MCPDefaultPolicy is the policy the MCP bench decides with when given
// none: the bench's tool is allowed, anything else refused.
const MCPDefaultPolicy = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy", "message": "only the bench's calc add is allowed"}

decision := {"action": "fulfill"} if {
	input.tool.server == "calc"
	input.tool.name == "add"
}
`

// MCPConfig is an MCP bench run: the in-repo tool server reached
// directly by go-sdk clients, through a bare go-sdk relay (the floor of
// any proxy on these transports: newBareRelay) and through the real MCP
// front end (internal/mcpserve, as `fulfiller mcp` and `mcp serve` run
// it), the calls interleaved so that all three sides see the same
// machine.
type MCPConfig struct {
	// Transport is MCPStdio or MCPHTTP: how the clients reach the front
	// end (and the bare relay).
	Transport string
	// Upstream is how the front end, the relay and the direct clients
	// reach the tool server: MCPStdio (a child, Child) or MCPHTTP (served
	// in this process on loopback); "" is Transport.
	Upstream string
	// Load is the clients' kind: LoadSDK (go-sdk clients; "" is it) or
	// LoadRaw (rawClient: Streamable HTTP spoken directly, proxied calls
	// only; needs Transport MCPHTTP).
	Load string
	// Child is the tool server's command for MCPStdio: a program that
	// serves toolserver.Calculator on its stdio (ServeCalculator). It is
	// started three times: once for the direct clients, once for the
	// bare relay, once as the front end's upstream.
	Child []string
	// ChildEnv is added to the child's environment.
	ChildEnv []string
	// Policies and Data are the front end's --policy and --data; none:
	// MCPDefaultPolicy.
	Policies, Data []string
	// PolicyTimeout is --policy-timeout.
	PolicyTimeout time.Duration
	// Calls is the measured calls per side (direct and proxied).
	Calls int
	// Clients is the concurrent clients; each has a direct session, one
	// through the bare relay and one through the front end, and calls
	// them in turn.
	Clients int
	// ProxiedOnly leaves the direct and relayed calls out: mcp serve's
	// throughput alone.
	ProxiedOnly bool
	// CallTimeout is how long one call may take before it counts as
	// unanswered.
	CallTimeout time.Duration
	// CPUProfile, when set, receives the CPU profile of the measured
	// window, goroutines labelled component=fulfiller|relay|tool|clients.
	CPUProfile io.Writer
	// Logger logs the front end's events [discarded].
	Logger *slog.Logger
}

// MCPReport is what an MCP bench run measured: round trips in µs.
type MCPReport struct {
	FrontEnd  string `json:"front_end"`
	Transport string `json:"transport"`
	// Upstream is how the tool server is reached; Load the clients' kind.
	Upstream string `json:"upstream"`
	Load     string `json:"load"`
	Clients  int    `json:"clients"`
	// Calls is the measured calls asked per side.
	Calls       int         `json:"calls"`
	ProxiedOnly bool        `json:"proxied_only,omitempty"`
	Direct      Percentiles `json:"direct"`
	// Relayed are the calls through the bare go-sdk relay: what the two
	// extra hops cost without fulfiller.
	Relayed Percentiles `json:"relayed"`
	// LineRelayed are the calls through the raw line relay (stdio on
	// both sides only): a client on OS pipes, two goroutines copying
	// lines, the tool server: the true floor of two local hops.
	LineRelayed Percentiles `json:"line_relayed,omitzero"`
	// PolicyFloor are the calls through the raw line relay that also
	// decides each call once with the front end's policies on its own
	// goroutine (floorDecider; stdio on both sides only): DESIGN.md's
	// "the policy decision and two local hops", with nothing else.
	PolicyFloor Percentiles `json:"policy_floor,omitzero"`
	Proxied     Percentiles `json:"proxied"`
	// RatioP50 is proxied p50 ÷ direct p50 (target ≤ 1.3); AddedP50 the
	// difference in µs (target ≤ 150).
	RatioP50 float64 `json:"ratio_p50"`
	AddedP50 float64 `json:"added_p50_us"`
	RatioP90 float64 `json:"ratio_p90"`
	RatioP99 float64 `json:"ratio_p99"`
	// RelayRatioP50 is the bare relay's p50 ÷ direct p50: over 1.3 the
	// target is out of reach of any go-sdk proxy on these transports.
	// OverRelayP50 is what fulfiller adds over the relay at p50 (µs).
	RelayRatioP50 float64 `json:"relay_ratio_p50"`
	OverRelayP50  float64 `json:"over_relay_p50_us"`
	// LineRelayRatioP50 is the raw line relay's p50 ÷ direct p50, and
	// OverLineRelayP50 what fulfiller adds over it at p50 (µs): its own
	// cost beyond the two hops.
	LineRelayRatioP50 float64 `json:"line_relay_ratio_p50,omitempty"`
	OverLineRelayP50  float64 `json:"over_line_relay_p50_us,omitempty"`
	// PolicyFloorRatioP50 is the policy floor's p50 ÷ direct p50 and
	// PolicyFloorAddedP50 its µs over direct: what no front end that
	// decides before it forwards can go below on this machine.
	// OverPolicyFloorP50 is what fulfiller adds over it at p50 (µs):
	// the engine, the record, the log and the front end's own work.
	PolicyFloorRatioP50 float64 `json:"policy_floor_ratio_p50,omitempty"`
	PolicyFloorAddedP50 float64 `json:"policy_floor_added_p50_us,omitempty"`
	OverPolicyFloorP50  float64 `json:"over_policy_floor_p50_us,omitempty"`
	// Seconds is the measured window; ProxiedPerSec the calls answered
	// through the front end per second of it, CallsPerSec all calls'.
	Seconds       float64 `json:"seconds"`
	ProxiedPerSec float64 `json:"proxied_calls_per_sec"`
	CallsPerSec   float64 `json:"calls_per_sec"`
	// Errors are calls answered wrongly (a transport or JSON-RPC error,
	// isError, or a result other than the sum); FirstError says the first.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Unanswered are calls with no answer within the call timeout, or
	// never made (the run ended).
	Unanswered int64 `json:"unanswered"`
	// FulfillerCPUPerCall is the front end's own CPU (µs) per proxied
	// call, from the labelled CPU profile; ProcessCPUPerCall the whole
	// bench process's per call (either side; the stdio tool server, a
	// child, not in it).
	FulfillerCPUPerCall float64 `json:"fulfiller_cpu_per_call_us"`
	ProcessCPUPerCall   float64 `json:"process_cpu_per_call_us"`
	// ToolCPUPerCall is, over stdio, the tool server children's CPU (µs)
	// per call answered (Linux: /proc, in 10 ms ticks; 0 elsewhere and
	// over HTTP, where the tool server is in the process's figure).
	ToolCPUPerCall float64 `json:"tool_child_cpu_per_call_us"`
	// RelayCPUPerCall is the bare relay's CPU (µs) per relayed call,
	// measured as FulfillerCPUPerCall is.
	RelayCPUPerCall float64 `json:"relay_cpu_per_call_us"`
	// CPUShares are the profile's samples by component (fraction).
	CPUShares map[string]float64 `json:"cpu_shares,omitempty"`
	Notes     []string           `json:"notes,omitempty"`
}

// OK is whether every call was answered, rightly.
func (r *MCPReport) OK() bool {
	return r.Errors == 0 && r.Unanswered == 0 && r.Proxied.Count == r.Calls &&
		(r.ProxiedOnly || r.Direct.Count == r.Calls && r.Relayed.Count == r.Calls &&
			(!r.lineRelayed() || r.LineRelayed.Count == r.Calls && r.PolicyFloor.Count == r.Calls))
}

// lineRelayed: the run has the raw line relay's side and the policy
// floor's (stdio on both sides, not proxied only).
func (r *MCPReport) lineRelayed() bool {
	return hasLineRelay(r.Transport, r.Upstream, r.ProxiedOnly)
}

func hasLineRelay(transport, upstream string, proxiedOnly bool) bool {
	return transport == MCPStdio && upstream == MCPStdio && !proxiedOnly
}

// WriteText prints r for a person.
func (r *MCPReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "front end: mcp over %s, tool server over %s, %d %s clients, %d calls per side", r.Transport, r.Upstream, r.Clients, r.Load, r.Calls)
	if r.ProxiedOnly {
		fmt.Fprint(w, " (proxied only)")
	}
	fmt.Fprintf(w, "\nmeasured: %.2f s, %.0f proxied calls/s, %.0f calls/s in all\n", r.Seconds, r.ProxiedPerSec, r.CallsPerSec)
	fmt.Fprintf(w, "%-9s %8s %9s %9s %9s %9s\n", "", "calls", "p50 µs", "p90 µs", "p99 µs", "max µs")
	row := func(name string, p Percentiles) {
		fmt.Fprintf(w, "%-9s %8d %9.1f %9.1f %9.1f %9.1f\n", name, p.Count, p.P50, p.P90, p.P99, p.Max)
	}
	if !r.ProxiedOnly {
		row("direct", r.Direct)
		if r.lineRelayed() {
			row("raw relay", r.LineRelayed)
			row("floor", r.PolicyFloor)
		}
		row("relayed", r.Relayed)
	}
	row("proxied", r.Proxied)
	if !r.ProxiedOnly {
		fmt.Fprintf(w, "proxied ÷ direct: p50 %.2f× (%+.1f µs), p90 %.2f×, p99 %.2f×\n", r.RatioP50, r.AddedP50, r.RatioP90, r.RatioP99)
		if r.lineRelayed() {
			fmt.Fprintf(w, "raw line relay ÷ direct: p50 %.2f× (%+.1f µs); fulfiller over the raw relay: %+.1f µs at p50\n",
				r.LineRelayRatioP50, r.LineRelayed.P50-r.Direct.P50, r.OverLineRelayP50)
			fmt.Fprintf(w, "policy floor (the raw relay deciding each call once) ÷ direct: p50 %.2f× (%+.1f µs); fulfiller over the floor: %+.1f µs at p50\n",
				r.PolicyFloorRatioP50, r.PolicyFloorAddedP50, r.OverPolicyFloorP50)
		}
		fmt.Fprintf(w, "bare relay ÷ direct: p50 %.2f× (%+.1f µs); fulfiller over the relay: %+.1f µs at p50 (the go-sdk relay)\n",
			r.RelayRatioP50, r.Relayed.P50-r.Direct.P50, r.OverRelayP50)
		fmt.Fprintf(w, "CPU per call: fulfiller %.1f µs, bare relay %.1f µs, whole process %.1f µs\n", r.FulfillerCPUPerCall, r.RelayCPUPerCall, r.ProcessCPUPerCall)
	} else {
		fmt.Fprintf(w, "CPU per call: fulfiller %.1f µs, whole process %.1f µs\n", r.FulfillerCPUPerCall, r.ProcessCPUPerCall)
	}
	if r.Upstream == MCPStdio {
		fmt.Fprintf(w, "CPU per call of the tool server children (stdio, not in the process's): %.1f µs\n", r.ToolCPUPerCall)
	}
	fmt.Fprintf(w, "errors: %d, unanswered: %d\n", r.Errors, r.Unanswered)
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", r.FirstError)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// ServeCalculator serves toolserver.Calculator on stdin and stdout until
// stdin closes: the MCP bench's child tool server.
func ServeCalculator(ctx context.Context) error {
	s := toolserver.NewMCP(&mcp.Implementation{Name: MCPServerName, Version: "1.0.0"}, toolserver.Calculator()...)
	return s.Run(ctx, &mcp.StdioTransport{})
}

// mcpRig is what a run talks to: how to reach the tool server directly
// and through the front end, and what to stop.
type mcpRig struct {
	direct  func(ctx context.Context) (*mcp.ClientSession, error)
	relay   func(ctx context.Context) (*mcp.ClientSession, error)
	proxied func(ctx context.Context) (*mcp.ClientSession, error)
	// lineRelay, over stdio on both sides: a client through the raw line
	// relay (lineRelay) to a tool server child of its own; floor, one
	// through the raw relay that decides each call (floorDecider).
	lineRelay, floor func(ctx context.Context) (*mcp.ClientSession, error)
	// proxiedURL is the front end's endpoint over MCPHTTP (raw clients).
	proxiedURL string
	// children are the stdio tool servers' commands (*exec.Cmd), whose
	// CPU is not the process's (childCPU); stored as the go-sdk starts
	// them, from whichever goroutine connects.
	children sync.Map
	closers  []func()
}

// childCPU is the CPU time the stdio tool servers running now have used.
func (r *mcpRig) childCPU() time.Duration {
	var sum time.Duration
	r.children.Range(func(k, _ any) bool {
		if cmd := k.(*exec.Cmd); cmd.Process != nil {
			if d, ok := procCPU(cmd.Process.Pid); ok {
				sum += d
			}
		}
		return true
	})
	return sum
}

func (r *mcpRig) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// RunMCP runs the MCP bench: cfg.Clients clients each alternating a call
// to the tool server directly and one through the front end (after a
// warm-up that is not measured), and reports both sides' round trips.
// It returns an error when the rig cannot start (ErrPolicy for the
// policy); wrong or missing answers are the report's.
func RunMCP(ctx context.Context, cfg MCPConfig) (*MCPReport, error) {
	if cfg.Clients < 1 || cfg.Calls < 1 {
		return nil, errors.New("mcp bench: clients and calls must be at least 1")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.Upstream == "" {
		cfg.Upstream = cfg.Transport
	}
	switch cfg.Load {
	case "":
		cfg.Load = LoadSDK
	case LoadSDK:
	case LoadRaw:
		if cfg.Transport != MCPHTTP {
			return nil, fmt.Errorf("mcp bench: the raw load speaks Streamable HTTP: transport %q, want %s", cfg.Transport, MCPHTTP)
		}
		// The raw clients call the front end only: the direct and
		// relayed sides are the SDK load's.
		cfg.ProxiedOnly = true
	default:
		return nil, fmt.Errorf("mcp bench: load %q: want %s or %s", cfg.Load, LoadSDK, LoadRaw)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Policies) == 0 {
		dir, err := os.MkdirTemp("", "fulfiller-mcpbench-")
		if err != nil {
			return nil, fmt.Errorf("mcp bench policy: %w", err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "bench.rego")
		if err := os.WriteFile(path, []byte(MCPDefaultPolicy), 0o600); err != nil {
			return nil, fmt.Errorf("mcp bench policy: %w", err)
		}
		cfg.Policies = []string{path}
	}
	rig, err := startMCPRig(ctx, cfg, log)
	if rig != nil {
		defer rig.close()
	}
	if err != nil {
		return nil, err
	}
	if cfg.Load == LoadRaw {
		return measureRaw(ctx, cfg, rig)
	}
	return measureMCP(ctx, cfg, rig)
}

// startMCPRig starts the tool server and the front end (labelled
// fulfiller in the profile) as cfg.Transport says.
func startMCPRig(ctx context.Context, cfg MCPConfig, log *slog.Logger) (*mcpRig, error) {
	rig := &mcpRig{}
	var up mcpfront.Upstream
	var hc *http.Client
	// relayUp is the bare relay's own transport to the tool server, as
	// the front end has its own.
	var relayUp func() (mcp.Transport, error)
	switch cfg.Upstream {
	case MCPStdio:
		if len(cfg.Child) == 0 {
			return rig, errors.New("mcp bench: stdio needs the tool server's command")
		}
		child := func() (mcp.Transport, error) {
			cmd := exec.Command(cfg.Child[0], cfg.Child[1:]...)
			cmd.Env = append(os.Environ(), cfg.ChildEnv...)
			cmd.Stderr = os.Stderr
			rig.children.Store(cmd, struct{}{})
			return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
		}
		up = mcpfront.Upstream{Name: MCPServerName, What: "the bench's tool server", Transport: child}
		relayUp = child
		if hasLineRelay(cfg.Transport, cfg.Upstream, cfg.ProxiedOnly) {
			track := func(cmd *exec.Cmd) { rig.children.Store(cmd, struct{}{}) }
			connect := func(ctx context.Context, component string, decide func([]byte) []byte) (*mcp.ClientSession, error) {
				t, stop, err := lineRelayDeciding(ctx, cfg.Child, cfg.ChildEnv, track, component, decide)
				if err != nil {
					return nil, err
				}
				cs, err := benchClient().Connect(ctx, t, nil)
				if err != nil {
					stop()
					return nil, err
				}
				rig.closers = append(rig.closers, func() { _ = cs.Close(); stop() })
				return cs, nil
			}
			rig.lineRelay = func(ctx context.Context) (*mcp.ClientSession, error) {
				return connect(ctx, ComponentLineRelay, nil)
			}
			rig.floor = func(ctx context.Context) (*mcp.ClientSession, error) {
				// The floor's own engine, loaded as the front end loads
				// its policies: its decisions are the front end's.
				eng, err := policies.Load(ctx, policies.Options{Policies: cfg.Policies, Data: cfg.Data, Timeout: cfg.PolicyTimeout, Logger: log})
				if err != nil {
					return nil, fmt.Errorf("the policy floor's policies: %w", err)
				}
				return connect(ctx, ComponentFloor, (&floorDecider{eng: eng, client: "bench"}).decide)
			}
		}
		// The direct clients share one child and one session, as the
		// front end's calls share its upstream's.
		var once sync.Once
		var shared *mcp.ClientSession
		var sharedErr error
		rig.direct = func(ctx context.Context) (*mcp.ClientSession, error) {
			once.Do(func() {
				t, _ := child()
				shared, sharedErr = benchClient().Connect(ctx, t, nil)
				if sharedErr == nil {
					rig.closers = append(rig.closers, func() { _ = shared.Close() })
				}
			})
			return shared, sharedErr
		}
	case MCPHTTP:
		// Enough idle connections for every client's session, so that
		// no call pays for a new TCP connection.
		hc = &http.Client{Transport: &http.Transport{MaxIdleConns: 4*cfg.Clients + 16, MaxIdleConnsPerHost: 4*cfg.Clients + 16, IdleConnTimeout: time.Minute}}
		tool := toolserver.NewMCP(&mcp.Implementation{Name: MCPServerName, Version: "1.0.0"}, toolserver.Calculator()...)
		url, stop, err := serveLoopback(ctx, ComponentTool, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return tool }, nil))
		if err != nil {
			return rig, err
		}
		rig.closers = append(rig.closers, stop)
		up = mcpfront.URLUpstream(MCPServerName, url, hc)
		relayUp = func() (mcp.Transport, error) {
			return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil
		}
		rig.direct = func(ctx context.Context) (*mcp.ClientSession, error) {
			return benchClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
		}
	default:
		return rig, fmt.Errorf("mcp bench: upstream %q: want stdio or http", cfg.Upstream)
	}
	if cfg.Transport != MCPStdio && cfg.Transport != MCPHTTP {
		return rig, fmt.Errorf("mcp bench: transport %q: want stdio or http", cfg.Transport)
	}
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{MaxIdleConns: 4*cfg.Clients + 16, MaxIdleConnsPerHost: 4*cfg.Clients + 16, IdleConnTimeout: time.Minute}}
	}

	// The bare relay: one session to the tool server for all its
	// clients, as the front end's upstream is one.
	var relay *mcp.Server
	var err error
	if !cfg.ProxiedOnly {
		labelled(ctx, ComponentRelay, func(ctx context.Context) {
			var t mcp.Transport
			if t, err = relayUp(); err != nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var cs *mcp.ClientSession
			if cs, err = benchClient().Connect(cctx, t, nil); err != nil {
				return
			}
			rig.closers = append(rig.closers, func() { _ = cs.Close() })
			relay = newBareRelay(cs)
		})
		if err != nil {
			return rig, fmt.Errorf("mcp bench: the bare relay's session to the tool server: %w", err)
		}
	}

	var srv *mcpserve.Server
	labelled(ctx, ComponentFulfiller, func(ctx context.Context) {
		srv, err = mcpserve.Start(ctx, mcpserve.Config{
			Upstreams: []mcpfront.Upstream{up}, State: state.Mode{Kind: state.Memory},
			Policy:   policies.Options{Policies: cfg.Policies, Data: cfg.Data, Timeout: cfg.PolicyTimeout, Logger: log},
			ClientID: "bench", Logger: log, Version: "bench",
		})
	})
	if err != nil {
		if se, ok := errors.AsType[*mcpserve.StartError](err); ok && se.Part == "policy" {
			return rig, fmt.Errorf("%w: %w", ErrPolicy, se.Err)
		}
		return rig, fmt.Errorf("mcp bench: start the front end: %w", err)
	}
	rig.closers = append(rig.closers, func() { _ = srv.Close() })
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := srv.Front().Ready(rctx, MCPServerName); err != nil {
		return rig, fmt.Errorf("mcp bench: the tool server behind the front end: %w", err)
	}

	switch cfg.Transport {
	case MCPStdio:
		// The client on OS pipes, as a client that started `fulfiller
		// mcp` is on its stdin and stdout; the front end serves it as
		// runMCPStdio does.
		rig.proxied = func(ctx context.Context) (*mcp.ClientSession, error) {
			return rig.overPipes(ctx, ComponentFulfiller, func(ctx context.Context, t mcp.Transport) error {
				return srv.ServeStdio(ctx, MCPServerName, t)
			})
		}
		rig.relay = func(ctx context.Context) (*mcp.ClientSession, error) {
			return rig.overPipes(ctx, ComponentRelay, func(ctx context.Context, t mcp.Transport) error {
				ss, err := relay.Connect(ctx, t, nil)
				if err != nil {
					return err
				}
				stop := context.AfterFunc(ctx, func() { _ = ss.Close() })
				defer stop()
				return ss.Wait()
			})
		}
	case MCPHTTP:
		var url string
		var stop func()
		labelled(ctx, ComponentFulfiller, func(ctx context.Context) {
			url, stop, err = serveLoopback(ctx, ComponentFulfiller, srv.Handler(mcpfront.HTTPOptions{}))
		})
		if err != nil {
			return rig, err
		}
		// Stopped before the front end closes (closers run backwards).
		rig.closers = append(rig.closers, stop)
		url = url[:len(url)-len("/mcp")] + "/mcp/" + MCPServerName
		rig.proxiedURL = url
		rig.proxied = func(ctx context.Context) (*mcp.ClientSession, error) {
			return benchClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
		}
		if relay != nil {
			relayURL, stopRelay, err := serveLoopback(ctx, ComponentRelay, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return relay }, nil))
			if err != nil {
				return rig, err
			}
			rig.closers = append(rig.closers, stopRelay)
			rig.relay = func(ctx context.Context) (*mcp.ClientSession, error) {
				return benchClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: relayURL, HTTPClient: hc, MaxRetries: -1}, nil)
			}
		}
	}
	return rig, nil
}

// overPipes connects a bench client on OS pipes to serve (run in a
// goroutine labelled component until the rig closes), as a client that
// started `fulfiller mcp` is on its stdin and stdout.
func (r *mcpRig) overPipes(ctx context.Context, component string, serve func(context.Context, mcp.Transport) error) (*mcp.ClientSession, error) {
	toServer, clientOut, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	clientIn, fromServer, err := os.Pipe()
	if err != nil {
		_ = toServer.Close()
		_ = clientOut.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	labelled(serveCtx, component, func(serveCtx context.Context) {
		go func() {
			defer close(done)
			_ = serve(serveCtx, &mcp.IOTransport{Reader: toServer, Writer: fromServer})
		}()
	})
	r.closers = append(r.closers, func() { stop(); _ = clientOut.Close(); <-done; _ = clientIn.Close() })
	return benchClient().Connect(ctx, &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
}

func benchClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "fulfiller-bench", Version: "1.0.0"}, nil)
}

// serveLoopback serves h on a loopback port, its goroutines labelled
// component, and returns its /mcp URL and what stops it.
func serveLoopback(ctx context.Context, component string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("mcp bench: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	labelled(ctx, component, func(context.Context) {
		go func() {
			defer close(done)
			_ = srv.Serve(ln)
		}()
	})
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
		<-done
	}
	return "http://" + ln.Addr().String() + "/mcp", stop, nil
}

// mcpTally is what the clients count, shared (the latencies are each
// client's own histograms, merged at the end).
type mcpTally struct {
	direct, relayed, line, floor, proxied histogram
	firstError                            atomic.Pointer[string] // the first failure's, kept
	errors                                atomic.Int64
	unanswered                            atomic.Int64
}

func (t *mcpTally) fail(side string, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		t.unanswered.Add(1)
	} else {
		t.errors.Add(1)
	}
	msg := side + ": " + err.Error()
	t.firstError.CompareAndSwap(nil, &msg)
}

// first is the first failure's message ("": none).
func (t *mcpTally) first() string {
	if p := t.firstError.Load(); p != nil {
		return *p
	}
	return ""
}

// measureMCP connects the clients, warms up, then runs the measured
// calls under a CPU profile.
func measureMCP(ctx context.Context, cfg MCPConfig, rig *mcpRig) (*MCPReport, error) {
	type client struct{ direct, relay, line, floor, proxied *mcp.ClientSession }
	clients := make([]client, cfg.Clients)
	var err error
	labelled(ctx, ComponentClients, func(ctx context.Context) {
		for i := range clients {
			if !cfg.ProxiedOnly {
				if clients[i].direct, err = rig.direct(ctx); err != nil {
					err = fmt.Errorf("mcp bench: connect to the tool server: %w", err)
					return
				}
				if clients[i].relay, err = rig.relay(ctx); err != nil {
					err = fmt.Errorf("mcp bench: connect to the bare relay: %w", err)
					return
				}
				r := clients[i].relay
				rig.closers = append(rig.closers, func() { _ = r.Close() })
				if rig.lineRelay != nil {
					if clients[i].line, err = rig.lineRelay(ctx); err != nil {
						err = fmt.Errorf("mcp bench: connect to the raw line relay: %w", err)
						return
					}
					if clients[i].floor, err = rig.floor(ctx); err != nil {
						err = fmt.Errorf("mcp bench: connect to the policy floor: %w", err)
						return
					}
				}
			}
			if clients[i].proxied, err = rig.proxied(ctx); err != nil {
				err = fmt.Errorf("mcp bench: connect to the front end: %w", err)
				return
			}
			p := clients[i].proxied
			rig.closers = append(rig.closers, func() { _ = p.Close() })
			if d := clients[i].direct; d != nil && cfg.Transport == MCPHTTP {
				rig.closers = append(rig.closers, func() { _ = d.Close() })
			}
		}
	})
	if err != nil {
		return nil, err
	}

	tally := &mcpTally{}
	call := func(ctx context.Context, cs *mcp.ClientSession, side string, h *histogram) bool {
		// Params of its own per call: CallTool writes into them (_meta).
		params := &mcp.CallToolParams{Name: MCPTool, Arguments: map[string]any{"a": 1, "b": 2}}
		cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
		defer cancel()
		t0 := time.Now()
		res, err := cs.CallTool(cctx, params)
		d := time.Since(t0)
		switch {
		case err != nil:
			tally.fail(side, err)
			return false
		case res.IsError || len(res.Content) != 1:
			tally.fail(side, fmt.Errorf("answered isError=%v: %s", res.IsError, resultText(res)))
			return false
		case resultText(res) != "3":
			tally.fail(side, fmt.Errorf("answered %q, want 3", resultText(res)))
			return false
		}
		if h != nil {
			h.record(d.Nanoseconds())
		}
		return true
	}

	// Warm-up: connections, the policy's first evaluations, the Go
	// runtime's pools; not measured.
	warm := max(1, min(50, cfg.Calls/(10*cfg.Clients)))
	var wg sync.WaitGroup
	labelled(ctx, ComponentClients, func(ctx context.Context) {
		for _, c := range clients {
			wg.Go(func() {
				for range warm {
					if c.direct != nil {
						call(ctx, c.direct, "direct (warm-up)", nil)
						call(ctx, c.relay, "relayed (warm-up)", nil)
					}
					if c.line != nil {
						call(ctx, c.line, "raw relay (warm-up)", nil)
						call(ctx, c.floor, "policy floor (warm-up)", nil)
					}
					call(ctx, c.proxied, "proxied (warm-up)", nil)
				}
			})
		}
	})
	wg.Wait()
	if tally.errors.Load() > 0 || tally.unanswered.Load() > 0 {
		// A rig that cannot answer is not measured: the report says why.
		// The measured calls were never made: unanswered, every one.
		never := int64(cfg.Calls * mcpSides(cfg))
		return warmUpFailed(cfg, tally, never), nil
	}

	var prof bytes.Buffer
	profErr := pprof.StartCPUProfile(&prof)
	cpu0, child0 := cpuTime(), rig.childCPU()
	start := time.Now()
	var next atomic.Int64
	hists := make([][5]histogram, len(clients))
	labelled(ctx, ComponentClients, func(ctx context.Context) {
		for i, c := range clients {
			wg.Go(func() {
				h := &hists[i]
				for next.Add(1) <= int64(cfg.Calls) && ctx.Err() == nil {
					// Interleaved: a direct call, a relayed one, then a
					// proxied one, so that all see the machine as it is
					// at the time.
					if c.direct != nil {
						call(ctx, c.direct, "direct", &h[0])
						call(ctx, c.relay, "relayed", &h[2])
					}
					if c.line != nil {
						call(ctx, c.line, "raw relay", &h[3])
						call(ctx, c.floor, "policy floor", &h[4])
					}
					call(ctx, c.proxied, "proxied", &h[1])
				}
			})
		}
	})
	wg.Wait()
	elapsed := time.Since(start)
	cpu, child := cpuTime()-cpu0, rig.childCPU()-child0
	if profErr == nil {
		pprof.StopCPUProfile()
	}
	for i := range hists {
		tally.direct.merge(&hists[i][0])
		tally.proxied.merge(&hists[i][1])
		tally.relayed.merge(&hists[i][2])
		tally.line.merge(&hists[i][3])
		tally.floor.merge(&hists[i][4])
	}
	return finishMCP(cfg, tally, elapsed, cpu, child, &prof, profErr)
}

// mcpSides is how many sides a run of cfg calls: proxied; direct and
// the go-sdk relay unless proxied only; the raw line relay and the
// policy floor over stdio.
func mcpSides(cfg MCPConfig) int {
	switch {
	case cfg.ProxiedOnly:
		return 1
	case hasLineRelay(cfg.Transport, cfg.Upstream, cfg.ProxiedOnly):
		return 5
	}
	return 3
}

// newMCPReport is a report of cfg's run with nothing measured yet.
func newMCPReport(cfg MCPConfig) *MCPReport {
	return &MCPReport{FrontEnd: "mcp", Transport: cfg.Transport, Upstream: cfg.Upstream, Load: cfg.Load, Clients: cfg.Clients, Calls: cfg.Calls, ProxiedOnly: cfg.ProxiedOnly}
}

// warmUpFailed is the report of a run whose warm-up failed: a rig that
// cannot answer is not measured, and the never made calls (never) are
// unanswered.
func warmUpFailed(cfg MCPConfig, tally *mcpTally, never int64) *MCPReport {
	rep := newMCPReport(cfg)
	rep.Errors, rep.Unanswered, rep.FirstError = tally.errors.Load(), tally.unanswered.Load()+never, tally.first()
	rep.Notes = append(rep.Notes, "the warm-up failed: nothing measured")
	return rep
}

// finishMCP makes the report of a measured window: the tally's merged
// histograms, elapsed wall time, the process's CPU time cpu, the stdio
// tool servers' child, and its CPU profile prof (profErr: none was
// taken).
func finishMCP(cfg MCPConfig, tally *mcpTally, elapsed, cpu, child time.Duration, prof *bytes.Buffer, profErr error) (*MCPReport, error) {
	rep := newMCPReport(cfg)
	rep.Seconds = elapsed.Seconds()
	rep.Direct, rep.Relayed, rep.Proxied = tally.direct.percentiles(), tally.relayed.percentiles(), tally.proxied.percentiles()
	rep.LineRelayed, rep.PolicyFloor = tally.line.percentiles(), tally.floor.percentiles()
	rep.Errors, rep.FirstError = tally.errors.Load(), tally.first()
	answered := int64(rep.Direct.Count + rep.Relayed.Count + rep.LineRelayed.Count + rep.PolicyFloor.Count + rep.Proxied.Count)
	rep.Unanswered = int64(mcpSides(cfg)*cfg.Calls) - answered - rep.Errors
	rep.ProxiedPerSec = float64(rep.Proxied.Count) / elapsed.Seconds()
	rep.CallsPerSec = float64(answered) / elapsed.Seconds()
	if rep.Direct.P50 > 0 {
		rep.RatioP50 = rep.Proxied.P50 / rep.Direct.P50
		rep.AddedP50 = rep.Proxied.P50 - rep.Direct.P50
		rep.RatioP90 = rep.Proxied.P90 / rep.Direct.P90
		rep.RatioP99 = rep.Proxied.P99 / rep.Direct.P99
		rep.RelayRatioP50 = rep.Relayed.P50 / rep.Direct.P50
		rep.OverRelayP50 = rep.Proxied.P50 - rep.Relayed.P50
		if rep.LineRelayed.Count > 0 {
			rep.LineRelayRatioP50 = rep.LineRelayed.P50 / rep.Direct.P50
			rep.OverLineRelayP50 = rep.Proxied.P50 - rep.LineRelayed.P50
		}
		if rep.PolicyFloor.Count > 0 {
			rep.PolicyFloorRatioP50 = rep.PolicyFloor.P50 / rep.Direct.P50
			rep.PolicyFloorAddedP50 = rep.PolicyFloor.P50 - rep.Direct.P50
			rep.OverPolicyFloorP50 = rep.Proxied.P50 - rep.PolicyFloor.P50
		}
	}
	if answered > 0 {
		rep.ProcessCPUPerCall = float64(cpu.Microseconds()) / float64(answered)
		rep.ToolCPUPerCall = float64(child.Microseconds()) / float64(answered)
	}
	if profErr != nil {
		rep.Notes = append(rep.Notes, "no CPU profile ("+profErr.Error()+"): the fulfiller's CPU per call is not known")
		return rep, nil
	}
	if cfg.CPUProfile != nil {
		if _, err := cfg.CPUProfile.Write(prof.Bytes()); err != nil {
			return nil, fmt.Errorf("write the CPU profile: %w", err)
		}
	}
	sums, err := cpuByLabel(prof.Bytes(), LabelKey)
	if err != nil {
		rep.Notes = append(rep.Notes, err.Error())
		return rep, nil
	}
	var total int64
	for _, v := range sums {
		total += v
	}
	if total > 0 {
		rep.CPUShares = map[string]float64{}
		for k, v := range sums {
			if k == "" {
				k = ComponentOther
			}
			rep.CPUShares[k] += float64(v) / float64(total)
		}
		// The profile's shares apply to the process's measured CPU time,
		// which the profile's sampling undercounts.
		if rep.Proxied.Count > 0 {
			rep.FulfillerCPUPerCall = rep.CPUShares[ComponentFulfiller] * float64(cpu.Microseconds()) / float64(rep.Proxied.Count)
		}
		if rep.Relayed.Count > 0 {
			rep.RelayCPUPerCall = rep.CPUShares[ComponentRelay] * float64(cpu.Microseconds()) / float64(rep.Relayed.Count)
		}
	}
	return rep, nil
}

func resultText(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if t, ok := res.Content[0].(*mcp.TextContent); ok {
		return t.Text
	}
	return fmt.Sprintf("%T", res.Content[0])
}
