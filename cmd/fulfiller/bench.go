package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/loadtest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

type benchFlags struct {
	proposers, proposals, window int
	rate                         float64
	mix, from                    string
	policies, data               []string
	maxPending, maxInflight      int
	stallTimeout, policyTimeout  time.Duration
	jsonOut, progress            bool
	vsOPA                        bool
	opaBin                       string
	opaDecisions                 int
	cpuProfile, heapProfile      string
	logLevel                     string
	state, stateCreds            string
	stateCompare                 bool
	stateBaseline                string
	rounds                       int
	toolStyle                    string
	memoryLimit                  sizeValue
	// --front-end mcp's (benchMCP).
	frontEnd, mcpTransport string
	mcpUpstream, load      string
	clients, calls         int
	proxiedOnly            bool
	callTimeout            time.Duration
}

func newBenchCmd() *cobra.Command {
	var fl benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test the fulfiller over loopback WebSocket and report throughput, latency and memory",
		Long: `bench starts, in this process, an in-process MEW space, a sample tool server
("fs"), the real fulfiller with --policy/--data and --proposers proposer
participants, each on its own WebSocket. They send --proposals proposals
(a --mix of fulfil, reject and invalid ones, or the lines of --from) and
watch for each one's answer: the fulfilment mcp/request correlated to it,
or its mcp/reject.

It reports proposals/s sustained, latency from sending to the answer
(p50/p90/p99/max), the tool round trip of fulfilled proposals, answers by
outcome, unanswered proposals and duplicate answers, and peak memory. It
exits 1 when any proposal is unanswered or answered twice, so it can gate CI.

--tool-style says how the tool owner answers: jsonrpc (an MCP server that
echoes JSON-RPC ids), sdk (as mew bridge and every participant built on
the MEW reference SDK do: {"result": …} with no jsonrpc and no id), or
compare (the same load with each, one after the other, and the ratio of
their throughputs, target >= 0.9). Honest answers refused as spoof
attempts fail the run.

With --vs-opa-server it also decides the policy inputs of the run with the
embedded engine and with an OPA server sidecar (opa run --server, queried
over HTTP) at the same concurrency, and prints both and the ratios.

--state gives the fulfiller a state store as in run: memory (the default:
the embedded store in memory, as run --state memory), a DIR (an embedded
store synced to disk, in a fresh subdirectory of DIR removed after the
run, so put DIR on the disk you mean to measure) or nats://host:port (the
space "fulfiller-bench" on that cluster; proposal ids are unique per run).
--state none keeps the records in the process's own maps, with no NATS:
the decision path alone.
--state-compare runs the same load with memory first and then with
--state, prints both and what durability costs (throughput ratio, target
>= 0.7). Every report gives the fulfiller's own CPU per proposal, apart
from the space, tool and proposers in the same process, from a CPU
profile of the measured window labelled by component.

--front-end mcp measures fulfiller mcp instead: the in-repo tool server
(calc, its add tool) reached by go-sdk clients directly, through a bare
go-sdk relay (no engine, no policy: the floor of any proxy on the same
transports) and through the real MCP front end with --policy/--data
(default: a policy that allows calc's add), each client calling the three
in turn, so all see the same machine. It reports each side's round trips
(p50/p90/p99), proxied ÷ direct and the µs added at p50, the relay ÷
direct and what fulfiller adds over the relay, calls/s, the fulfiller's
and the relay's CPU per call and errors; it exits 1 on any error or
unanswered call. --mcp-transport stdio (default) is fulfiller mcp: one
client on OS pipes, the tool server a child on its stdio (this program
re-executed); http is mcp serve: --clients clients over loopback
Streamable HTTP, the tool server on loopback HTTP too; --proxied-only
leaves the direct and relayed calls out, for mcp serve's throughput alone.
--mcp-upstream says how the tool server is reached (default: as
--mcp-transport). --load raw replaces the go-sdk clients by a load
generator that speaks Streamable HTTP itself (an initialize handshake per
session, then pre-encoded tools/call POSTs on a keep-alive connection,
each answer checked to be exactly the calculator's), as wrk does for HTTP
servers, so that the clients' own CPU does not crowd the server's: it
needs --mcp-transport http and measures proxied calls only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fl.frontEnd == "mcp" {
				return benchMCP(cmd, fl)
			}
			if fl.frontEnd != "mew" {
				return usageErrorf("--front-end %q: want mew or mcp", fl.frontEnd)
			}
			if err := onlyFlagsOf(cmd, "--front-end mcp", mcpBenchFlags); err != nil {
				return err
			}
			return runBench(cmd, fl)
		},
	}
	cmd.AddCommand(newBenchToolServerCmd())
	f := cmd.Flags()
	f.StringVar(&fl.frontEnd, "front-end", "mew", "which front end to load: mew (a MEW space, as run) or mcp (fulfiller mcp, against direct calls)")
	f.StringVar(&fl.mcpTransport, "mcp-transport", loadtest.MCPStdio, "with --front-end mcp: stdio (fulfiller mcp, the tool server a child) or http (mcp serve over loopback)")
	f.IntVar(&fl.clients, "clients", 0, "with --front-end mcp: concurrent clients, each alternating a direct and a proxied call (default: 1 over stdio, 8 over http)")
	f.IntVar(&fl.calls, "calls", 20_000, "with --front-end mcp: measured calls per side (direct and proxied)")
	f.StringVar(&fl.mcpUpstream, "mcp-upstream", "", "with --front-end mcp: how the tool server is reached, stdio (a child) or http (loopback in this process); default: as --mcp-transport")
	f.StringVar(&fl.load, "load", loadtest.LoadSDK, "with --front-end mcp: the clients, sdk (go-sdk clients) or raw (Streamable HTTP spoken directly, pre-encoded calls; needs --mcp-transport http, proxied calls only)")
	f.BoolVar(&fl.proxiedOnly, "proxied-only", false, "with --front-end mcp: no direct calls, only through the front end (its throughput alone)")
	f.DurationVar(&fl.callTimeout, "call-timeout", 10*time.Second, "with --front-end mcp: a call not answered within this counts as unanswered")
	f.IntVar(&fl.proposers, "proposers", 4, "proposer participants, each with its own WebSocket")
	f.IntVar(&fl.proposals, "proposals", 100_000, "proposals to send in all")
	f.Float64Var(&fl.rate, "rate", 0, "proposals per second in all; 0: as fast as possible")
	f.StringVar(&fl.mix, "mix", loadtest.DefaultMix.String(), "share of synthetic proposals: fulfil (read-only call), reject (write no rule allows), invalid (no method)")
	f.StringVar(&fl.from, "from", "", "JSONL `FILE` of proposals (envelopes or bare payloads) to send in turn instead of --mix")
	f.IntVar(&fl.window, "window", 32, "most proposals unfinished at once; the proposers wait beyond it (a proposal holds its place until it is rejected or its tool call is answered, so the default stays under the example policy's quota of 50 pending; raise it above --max-pending to flood)")
	f.StringArrayVar(&fl.policies, "policy", nil, "Rego policy file or directory (repeatable; default: examples/policies here, else the built-in copy)")
	f.StringArrayVar(&fl.data, "data", nil, "JSON or YAML data document (repeatable; default with the example policies: their data.yaml)")
	f.IntVar(&fl.maxPending, "max-pending", 1000, "the fulfiller's --max-pending")
	f.IntVar(&fl.maxInflight, "max-inflight", 64, "the fulfiller's --max-inflight")
	f.DurationVar(&fl.stallTimeout, "stall-timeout", 30*time.Second, "end the run when nothing was sent or answered for this long (the rest count as unanswered)")
	f.DurationVar(&fl.policyTimeout, "policy-timeout", 100*time.Millisecond, "the fulfiller's --policy-timeout: longest one policy evaluation may take (then: reject policy)")
	f.BoolVar(&fl.jsonOut, "json", false, "print the report as one JSON object")
	f.BoolVar(&fl.progress, "progress", false, "print a progress line a second to stderr (default: when stderr is a terminal)")
	f.BoolVar(&fl.vsOPA, "vs-opa-server", false, "also compare decision latency and throughput with an OPA server sidecar")
	f.StringVar(&fl.opaBin, "opa-bin", "", "`PATH` of an opa binary for --vs-opa-server (default: build the embedded OPA version once with go install into the user cache)")
	f.IntVar(&fl.opaDecisions, "opa-decisions", 20_000, "decisions per side and round for --vs-opa-server")
	f.Var(&fl.memoryLimit, "memory-limit", "soft limit of the Go runtime's memory for the whole bench process (as run --memory-limit sets it for the fulfiller), bytes or with a unit; 0: none. GOMEMLIMIT, when set, wins; --vs-opa-server gives the OPA server the same limit")
	f.StringVar(&fl.heapProfile, "heapprofile", "", "write a heap profile taken as the measured window ends (after a GC, before anything stops; with --state-compare the durable run's) to `FILE`: what the fulfiller and its store hold")
	f.StringVar(&fl.cpuProfile, "cpuprofile", "", "write the CPU profile of the measured window (first send to last answer; with --state-compare the durable run's) to `FILE`, goroutines labelled component=fulfiller|space|tool|proposers")
	f.StringVar(&fl.state, "state", "memory", "the fulfiller's state store: memory (embedded, in memory), `DIR` (a fresh embedded store inside it), nats://host:port[,…], or none (no store: the decision path alone)")
	f.StringVar(&fl.stateCreds, "state-creds", "", "NATS credentials `FILE` for --state nats://…")
	f.BoolVar(&fl.stateCompare, "state-compare", false, "run with --state-baseline first, then with --state, and compare (what durability costs)")
	f.StringVar(&fl.stateBaseline, "state-baseline", "memory", "what --state-compare measures --state against: memory (the same embedded store in memory; target ≥ 0.7×) or none (no NATS store, the decision path alone; target ≥ 0.9×)")
	f.IntVar(&fl.rounds, "rounds", 1, "with --state-compare or --tool-style compare: run both this many times (alternating which goes first) and give the median ratio")
	f.StringVar(&fl.toolStyle, "tool-style", "jsonrpc", "how the tool owner answers: jsonrpc (echoes JSON-RPC ids), sdk (as mew bridge: no jsonrpc, no id), or compare (both, one after the other)")
	f.StringVar(&fl.logLevel, "log-level", "error", "log level of the components: debug, info, warn or error")
	return cmd
}

// stateMode parses --state: nil for none (no NATS store, the decision
// path alone, as the bench measured before there was a store), else the
// mode to open.
func (fl *benchFlags) stateMode() (*state.Mode, error) {
	if fl.state == "none" {
		if fl.stateCompare || (fl.rounds != 1 && fl.toolStyle != "compare") || fl.stateCreds != "" {
			return nil, usageErrorf("--state none: no store, so no --state-compare, --rounds or --state-creds")
		}
		return nil, nil
	}
	m, err := state.ParseMode(fl.state)
	if err != nil {
		// Not the value itself: a URL may carry a password, which the
		// state error names without echoing.
		return nil, usageErrorf("--state %v", err)
	}
	if fl.stateCreds != "" && m.Kind != state.External {
		return nil, usageErrorf("--state-creds needs --state nats://…")
	}
	if fl.stateCreds != "" {
		if st, err := os.Stat(fl.stateCreds); err != nil || st.IsDir() {
			return nil, usageErrorf("--state-creds %q: not a readable file", fl.stateCreds)
		}
	}
	if m.Kind == state.Dir {
		if st, err := os.Stat(m.Dir); err == nil && !st.IsDir() {
			return nil, usageErrorf("--state %q: not a directory", m.Dir)
		}
	}
	switch {
	case fl.stateBaseline != "memory" && fl.stateBaseline != "none":
		return nil, usageErrorf("--state-baseline %q: want memory or none", fl.stateBaseline)
	case fl.stateBaseline != "memory" && !fl.stateCompare:
		return nil, usageErrorf("--state-baseline needs --state-compare")
	}
	if m.Kind == state.Memory && fl.stateCompare {
		return nil, usageErrorf("--state-compare needs --state DIR or nats://… to compare with memory")
	}
	if fl.rounds < 1 {
		return nil, usageErrorf("--rounds %d: must be at least 1", fl.rounds)
	}
	if fl.rounds > 1 && !fl.stateCompare && fl.toolStyle != "compare" {
		return nil, usageErrorf("--rounds needs --state-compare or --tool-style compare")
	}
	if fl.stateCompare && fl.vsOPA {
		return nil, usageErrorf("--state-compare with --vs-opa-server: run them one at a time")
	}
	return &m, nil
}

func (fl *benchFlags) validate() (loadtest.Mix, []loadtest.FileProposal, error) {
	for name, v := range map[string]int{"--proposers": fl.proposers, "--proposals": fl.proposals, "--window": fl.window,
		"--max-pending": fl.maxPending, "--max-inflight": fl.maxInflight, "--opa-decisions": fl.opaDecisions} {
		if v < 1 {
			return loadtest.Mix{}, nil, usageErrorf("%s %d: must be at least 1", name, v)
		}
	}
	if fl.rate < 0 {
		return loadtest.Mix{}, nil, usageErrorf("--rate %v: must not be negative (0: as fast as possible)", fl.rate)
	}
	if fl.policyTimeout <= 0 {
		return loadtest.Mix{}, nil, usageErrorf("--policy-timeout %s: must be positive", fl.policyTimeout)
	}
	if fl.memoryLimit < 0 {
		return loadtest.Mix{}, nil, usageErrorf("--memory-limit %s: must be 0 (none) or more", &fl.memoryLimit)
	}
	if fl.stallTimeout <= 0 {
		return loadtest.Mix{}, nil, usageErrorf("--stall-timeout %s: must be positive", fl.stallTimeout)
	}
	if fl.opaBin != "" && !fl.vsOPA {
		return loadtest.Mix{}, nil, usageErrorf("--opa-bin needs --vs-opa-server")
	}
	if fl.opaBin != "" {
		if st, err := os.Stat(fl.opaBin); err != nil || st.IsDir() {
			return loadtest.Mix{}, nil, usageErrorf("--opa-bin %q: not an executable file", fl.opaBin)
		}
	}
	mix, err := loadtest.ParseMix(fl.mix)
	if err != nil {
		return loadtest.Mix{}, nil, usageErrorf("--mix %q: %v", fl.mix, err)
	}
	var from []loadtest.FileProposal
	if fl.from != "" {
		if from, err = loadtest.ReadProposals(fl.from); err != nil {
			return loadtest.Mix{}, nil, usageErrorf("--from %v", err)
		}
	}
	if fl.toolStyle != "compare" {
		if _, err := toolserver.ParseStyle(fl.toolStyle); err != nil {
			return loadtest.Mix{}, nil, usageErrorf("--tool-style %q: want jsonrpc, sdk or compare", fl.toolStyle)
		}
	} else if fl.stateCompare || fl.vsOPA {
		return loadtest.Mix{}, nil, usageErrorf("--tool-style compare with --state-compare or --vs-opa-server: run them one at a time")
	}
	if len(fl.data) > 0 && len(fl.policies) == 0 {
		return loadtest.Mix{}, nil, usageErrorf("--data needs --policy (the example policies bring their own data)")
	}
	return mix, from, nil
}

func runBench(cmd *cobra.Command, fl benchFlags) error {
	mix, from, err := fl.validate()
	if err != nil {
		return err
	}
	stateMode, err := fl.stateMode()
	if err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, "text", fl.logLevel)
	if err != nil {
		return err
	}
	applyMemoryLimit(log, int64(fl.memoryLimit))
	if len(fl.policies) == 0 {
		dir, data, cleanup, err := loadtest.ExamplePolicies("")
		if err != nil {
			return err
		}
		defer cleanup()
		fl.policies, fl.data = []string{dir}, []string{data}
	}
	var progress io.Writer
	if fl.progress || term.IsTerminal(int(os.Stderr.Fd())) {
		progress = os.Stderr
	}
	var profile *os.File
	if fl.cpuProfile != "" {
		if profile, err = os.Create(fl.cpuProfile); err != nil {
			return usageErrorf("--cpuprofile %v", err)
		}
		defer profile.Close()
	}
	cfg := loadtest.Config{
		Policies: fl.policies, Data: fl.data, PolicyTimeout: fl.policyTimeout,
		Proposers: fl.proposers, Proposals: fl.proposals, Rate: fl.rate, Mix: mix, From: from, Window: fl.window,
		MaxPending: fl.maxPending, MaxInflight: fl.maxInflight, StallTimeout: fl.stallTimeout,
		Progress: progress, Logger: log,
		State: stateMode, StateCreds: fl.stateCreds,
	}
	if profile != nil {
		cfg.CPUProfile = profile
	}
	if fl.heapProfile != "" {
		hp, err := os.Create(fl.heapProfile)
		if err != nil {
			return usageErrorf("--heapprofile %v", err)
		}
		defer hp.Close()
		cfg.HeapProfile = hp
	}
	if fl.toolStyle == "compare" {
		return benchToolCompare(cmd, fl, cfg)
	}
	cfg.ToolStyle, _ = toolserver.ParseStyle(fl.toolStyle) // checked by validate
	if fl.stateCompare {
		return benchStateCompare(cmd, fl, cfg)
	}
	opaOpts := loadtest.OPAOptions{Bin: fl.opaBin, Decisions: fl.opaDecisions, Build: progress}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		// The server's collector works under the same limit as ours
		// (GOMEMLIMIT, which it inherits anyway, or --memory-limit).
		opaOpts.Env = []string{"GOMEMLIMIT=" + strconv.FormatInt(limit, 10)}
	}
	if fl.vsOPA {
		cfg.CaptureInputs = 2048
		// Find or build opa before the run, so that a machine that cannot
		// build it fails in seconds, not after the load run.
		if opaOpts.Bin, err = loadtest.OPABinary(cmd.Context(), opaOpts); err != nil {
			return fmt.Errorf("--vs-opa-server: %w", err)
		}
	}
	res, err := loadtest.Run(cmd.Context(), cfg)
	if err != nil {
		if errors.Is(err, loadtest.ErrPolicy) {
			return usageError(err) // names the policy or data file
		}
		return err
	}
	rep := &res.Report
	if fl.vsOPA {
		cmp, err := loadtest.CompareOPA(cmd.Context(), res.Engine, res.Inputs, opaOpts)
		if err != nil {
			return fmt.Errorf("--vs-opa-server: %w", err)
		}
		rep.OPA = cmp
	}
	if err := writeReport(cmd.OutOrStdout(), fl.jsonOut, rep); err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("bench failed: %d of %d proposals sent, %d unanswered, %d duplicate answers, %d honest answers refused as spoof attempts",
			rep.Sent, rep.Proposals, rep.Unanswered, rep.Duplicates, rep.SpoofAttempts)
	}
	return nil
}

// benchStateCompare runs cfg's load with the baseline (--state-baseline: a
// memory store, or none), then with cfg.State, --rounds times, and prints
// them and the cost of durability. Only the last durable run writes the
// CPU profile: two profiles in one file would not parse.
func benchStateCompare(cmd *cobra.Command, fl benchFlags, cfg loadtest.Config) error {
	var mems, durs []*loadtest.Report
	for i := range fl.rounds {
		memCfg := cfg
		memCfg.State, memCfg.StateCreds, memCfg.CPUProfile, memCfg.HeapProfile = &state.Mode{Kind: state.Memory}, "", nil, nil
		if fl.stateBaseline == "none" {
			memCfg.State = nil
		}
		mem, err := loadtest.Run(cmd.Context(), memCfg)
		if err != nil {
			if errors.Is(err, loadtest.ErrPolicy) {
				return usageError(err)
			}
			return fmt.Errorf("%s run %d: %w", fl.stateBaseline, i+1, err)
		}
		durCfg := cfg
		if i < fl.rounds-1 {
			durCfg.CPUProfile, durCfg.HeapProfile = nil, nil
		}
		dur, err := loadtest.Run(cmd.Context(), durCfg)
		if err != nil {
			return fmt.Errorf("durable run %d (--state %s): %w", i+1, cfg.State, err)
		}
		mems, durs = append(mems, &mem.Report), append(durs, &dur.Report)
	}
	c := loadtest.CompareState(fl.stateBaseline, mems, durs)
	if err := writeReport(cmd.OutOrStdout(), fl.jsonOut, c); err != nil {
		return err
	}
	if !c.OK() {
		return errors.New("bench failed: a run left proposals unsent, unanswered or answered twice (see the table)")
	}
	return nil
}

// benchToolCompare runs cfg's load with a tool owner that echoes
// JSON-RPC ids and then with one that answers as the reference SDK does,
// and prints both and the ratio of their throughputs. Only the SDK run
// writes the CPU profile.
func benchToolCompare(cmd *cobra.Command, fl benchFlags, cfg loadtest.Config) error {
	byStyle := map[toolserver.Style][]*loadtest.Report{}
	for i := range fl.rounds {
		// A second run in one process is slower than the first: the
		// rounds alternate which style goes first.
		order := []toolserver.Style{toolserver.StyleJSONRPC, toolserver.StyleSDK}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, style := range order {
			c := cfg
			c.ToolStyle = style
			if style != toolserver.StyleSDK || i < fl.rounds-1 {
				c.CPUProfile, c.HeapProfile = nil, nil // the last SDK run's only: two profiles in one file would not parse
			}
			res, err := loadtest.Run(cmd.Context(), c)
			if err != nil {
				if errors.Is(err, loadtest.ErrPolicy) {
					return usageError(err)
				}
				return fmt.Errorf("--tool-style %s run %d: %w", style, i+1, err)
			}
			byStyle[style] = append(byStyle[style], &res.Report)
		}
	}
	c := loadtest.CompareToolStyles(byStyle[toolserver.StyleJSONRPC], byStyle[toolserver.StyleSDK])
	if err := writeReport(cmd.OutOrStdout(), fl.jsonOut, c); err != nil {
		return err
	}
	if !c.OK() {
		return errors.New("bench failed: a run left proposals unsent, unanswered, answered twice, or refused honest answers (see the reports)")
	}
	return nil
}

// mcpBenchFlags are --front-end mcp's own; mewBenchFlags the MEW bench's
// that mean nothing to it (--policy, --data, --policy-timeout, --json,
// --cpuprofile and --log-level are both's).
var (
	mcpBenchFlags = []string{"mcp-transport", "mcp-upstream", "load", "clients", "calls", "proxied-only", "call-timeout"}
	mewBenchFlags = []string{"proposers", "proposals", "rate", "mix", "from", "window", "max-pending", "max-inflight",
		"stall-timeout", "progress", "vs-opa-server", "opa-bin", "opa-decisions", "memory-limit", "heapprofile",
		"state", "state-creds", "state-compare", "state-baseline", "rounds", "tool-style"}
)

// onlyFlagsOf refuses the flags in names when given: they belong to
// the other front end's bench (what).
func onlyFlagsOf(cmd *cobra.Command, what string, names []string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return usageErrorf("--%s is for %s", n, what)
		}
	}
	return nil
}

// benchMCP is bench --front-end mcp: loadtest.RunMCP with the flags.
func benchMCP(cmd *cobra.Command, fl benchFlags) error {
	if err := onlyFlagsOf(cmd, "--front-end mew", mewBenchFlags); err != nil {
		return err
	}
	if fl.mcpTransport != loadtest.MCPStdio && fl.mcpTransport != loadtest.MCPHTTP {
		return usageErrorf("--mcp-transport %q: want stdio or http", fl.mcpTransport)
	}
	if fl.mcpUpstream == "" {
		fl.mcpUpstream = fl.mcpTransport
	}
	if fl.mcpUpstream != loadtest.MCPStdio && fl.mcpUpstream != loadtest.MCPHTTP {
		return usageErrorf("--mcp-upstream %q: want stdio or http", fl.mcpUpstream)
	}
	switch fl.load {
	case loadtest.LoadSDK:
	case loadtest.LoadRaw:
		if fl.mcpTransport != loadtest.MCPHTTP {
			return usageErrorf("--load raw speaks Streamable HTTP: it needs --mcp-transport http")
		}
	default:
		return usageErrorf("--load %q: want sdk or raw", fl.load)
	}
	if fl.clients == 0 {
		fl.clients = 1
		if fl.mcpTransport == loadtest.MCPHTTP {
			fl.clients = 8
		}
	}
	for name, v := range map[string]int{"--clients": fl.clients, "--calls": fl.calls} {
		if v < 1 {
			return usageErrorf("%s %d: must be at least 1", name, v)
		}
	}
	if fl.policyTimeout <= 0 {
		return usageErrorf("--policy-timeout %s: must be positive", fl.policyTimeout)
	}
	if fl.callTimeout <= 0 {
		return usageErrorf("--call-timeout %s: must be positive", fl.callTimeout)
	}
	if len(fl.data) > 0 && len(fl.policies) == 0 {
		return usageErrorf("--data needs --policy (the default policy has no data)")
	}
	log, err := newLogger(os.Stderr, "text", fl.logLevel)
	if err != nil {
		return err
	}
	cfg := loadtest.MCPConfig{
		Transport: fl.mcpTransport, Upstream: fl.mcpUpstream, Load: fl.load, Policies: fl.policies, Data: fl.data, PolicyTimeout: fl.policyTimeout,
		Calls: fl.calls, Clients: fl.clients, ProxiedOnly: fl.proxiedOnly, CallTimeout: fl.callTimeout, Logger: log,
	}
	if fl.mcpUpstream == loadtest.MCPStdio {
		// The tool server is this program re-executed (no go run, no
		// second binary): bench mcp-tool-server.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this program for the tool server: %w", err)
		}
		cfg.Child = []string{exe, "bench", benchToolServerUse}
	}
	if fl.cpuProfile != "" {
		profile, err := os.Create(fl.cpuProfile)
		if err != nil {
			return usageErrorf("--cpuprofile %v", err)
		}
		defer profile.Close()
		cfg.CPUProfile = profile
	}
	rep, err := loadtest.RunMCP(cmd.Context(), cfg)
	if err != nil {
		if errors.Is(err, loadtest.ErrPolicy) {
			return usageError(err)
		}
		return err
	}
	if err := writeReport(cmd.OutOrStdout(), fl.jsonOut, rep); err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("bench failed: %d errors, %d unanswered calls (first: %s)", rep.Errors, rep.Unanswered, rep.FirstError)
	}
	return nil
}

const benchToolServerUse = "mcp-tool-server"

// newBenchToolServerCmd is the MCP bench's child: the in-repo calculator
// tool server on stdio. Hidden: only the bench starts it.
func newBenchToolServerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    benchToolServerUse,
		Short:  "Serve the MCP bench's tool server (calc) on stdio",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return loadtest.ServeCalculator(cmd.Context())
		},
	}
}

// writeReport prints r as indented JSON or as its text.
func writeReport(out io.Writer, jsonOut bool, r interface{ WriteText(io.Writer) }) error {
	if !jsonOut {
		r.WriteText(out)
		return nil
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
