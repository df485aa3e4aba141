package loadtest

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) {
	rate := "as fast as possible"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%.0f/s", r.Rate)
	}
	fmt.Fprintf(w, "fulfiller bench: %d proposals from %d proposers over loopback WebSocket\n", r.Proposals, r.Proposers)
	fmt.Fprintf(w, "  rate %s, window %d, max-pending %d, max-inflight %d, mix %s, policy %s, state %s, tool style %s\n",
		rate, r.Window, r.MaxPending, r.MaxInflight, r.Mix, r.Revision, r.State, r.ToolStyle)
	fmt.Fprintf(w, "sent            %d  (%s)\n", r.Sent, counts(r.SentByKind))
	fmt.Fprintf(w, "sustained       %.0f proposals/s  (%d answered in %.2fs)\n", r.Throughput, r.Answered, r.Seconds)
	fmt.Fprintf(w, "latency         %s  (sent → fulfilment mcp/request or mcp/reject seen by the proposer)\n", pct(r.Latency))
	fmt.Fprintf(w, "tool round trip %s  (fulfilled: sent → tool's mcp/response seen by the proposer)\n", pct(r.ToolRoundTrip))
	fmt.Fprintf(w, "outcomes        %s\n", counts(r.Outcomes))
	if r.ToolErrors > 0 {
		fmt.Fprintf(w, "tool errors     %d\n", r.ToolErrors)
	}
	fmt.Fprintf(w, "unanswered      %d\n", r.Unanswered)
	fmt.Fprintf(w, "spoof attempts  %d  (honest answers the fulfiller refused: must be 0)\n", r.SpoofAttempts)
	fmt.Fprintf(w, "duplicates      %d", r.Duplicates)
	if len(r.DuplicateKinds) > 0 {
		fmt.Fprintf(w, "  (%s)", counts(r.DuplicateKinds))
	}
	fmt.Fprintln(w)
	if r.FulfilTimeouts > 0 {
		fmt.Fprintf(w, "fulfil timeouts %d  (fulfilled, then rejected timeout: the tool did not answer in time)\n", r.FulfilTimeouts)
	}
	if r.CPUSeconds > 0 {
		fmt.Fprintf(w, "CPU             %.2fs of the whole process, %.0fµs per proposal\n", r.CPUSeconds, r.CPUPerProposal)
	}
	if r.CPUShare != nil {
		fmt.Fprintf(w, "fulfiller CPU per proposal: %.0f µs (%.0f%% of process CPU)\n", r.FulfillerCPUPerProposal, 100*r.CPUShare[ComponentFulfiller])
		fmt.Fprintf(w, "  %.0f µs with its pro-rata part of the unlabelled runtime CPU (GC marking, scheduler)\n", r.FulfillerCPUProRata)
		if r.HandoffsPerProposal > 0 {
			fmt.Fprintf(w, "goroutine hand-offs per proposal: %.1f  (the fulfiller's core loop: events posted to it, effects to its workers and back)\n", r.HandoffsPerProposal)
		}
		fmt.Fprintf(w, "CPU by component %s  (pprof label %s; the profile sampled %.2fs of the %.2fs)\n",
			shares(r.CPUShare), LabelKey, r.ProfiledCPUSeconds, r.CPUSeconds)
	} else if r.ProfileError != "" {
		fmt.Fprintf(w, "fulfiller CPU per proposal: not measured (%s)\n", r.ProfileError)
	}
	if len(r.StoreOps) > 0 {
		fmt.Fprintln(w, "store ops       (latency of each successful operation of the state store)")
		for _, op := range slices.Sorted(maps.Keys(r.StoreOps)) {
			p := r.StoreOps[op]
			fmt.Fprintf(w, "  %-8s %7d  %s\n", op, p.Count, pct(p))
		}
	}
	limit := "none"
	if r.MemoryLimit > 0 {
		limit = mib(uint64(r.MemoryLimit))
	}
	fmt.Fprintf(w, "peak memory     RSS %s (VmHWM, whole process), heap %s (sampled), Go memory limit %s\n", mib(r.PeakRSS), mib(r.PeakHeap), limit)
	if r.Stalled {
		fmt.Fprintln(w, "STALLED: nothing was answered for the stall timeout; the run was cut short")
	}
	if r.SendError != "" {
		fmt.Fprintf(w, "SEND FAILED: %s\n", r.SendError)
	}
	if c := r.OPA; c != nil {
		c.WriteText(w)
	}
}

// WriteText prints the comparison as a small table.
func (c *Comparison) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\ndecisions vs an OPA %s server sidecar: %d captured inputs, concurrency %d, %d decisions per side, median of %d alternating rounds\n",
		c.OPAVersion, c.Inputs, c.Concurrency, c.Decisions, c.Rounds)
	fmt.Fprintf(w, "  %-22s %10s %10s %14s\n", "", "p50", "p99", "decisions/s")
	fmt.Fprintf(w, "  %-22s %10s %10s %14.0f\n", "embedded (Decide)", us(c.Embedded.P50).Round(100*time.Nanosecond), us(c.Embedded.P99).Round(100*time.Nanosecond), c.Embedded.PerSecond)
	fmt.Fprintf(w, "  %-22s %10s %10s %14.0f\n", "OPA server (HTTP)", us(c.Server.P50).Round(100*time.Nanosecond), us(c.Server.P99).Round(100*time.Nanosecond), c.Server.PerSecond)
	fmt.Fprintf(w, "  %-22s %9.1f× %9.1f× %13.1f×\n", "embedded advantage", c.P50Ratio, c.P99Ratio, c.ThroughputRatio)
	fmt.Fprintf(w, "  same decision on %d of %d inputs", c.Agree, c.Agree+c.Disagree)
	if c.Example != "" {
		fmt.Fprintf(w, " (first difference: %s)", c.Example)
	}
	fmt.Fprintln(w)
	if c.FailedClosed > 0 {
		fmt.Fprintf(w, "  %d embedded decisions hit the evaluation timeout and failed closed\n", c.FailedClosed)
	}
}

func pct(p Percentiles) string {
	if p.Count == 0 {
		return "n/a"
	}
	r := func(v float64) time.Duration { return us(v).Round(time.Microsecond) }
	return fmt.Sprintf("p50 %v  p90 %v  p99 %v  max %v", r(p.P50), r(p.P90), r(p.P99), r(p.Max))
}

func counts(m map[string]int64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func shares(m map[string]float64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*m[k]))
	}
	return strings.Join(parts, ", ")
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// DurableTarget is the least share of the memory run's throughput a
// durable store should keep (issue 14: durable ≥ 0.7 × memory);
// DurableVsNoneTarget the least share of a run with no NATS store
// (issue 28: durable ≥ 0.9 × none).
const (
	DurableTarget       = 0.7
	DurableVsNoneTarget = 0.9
)

// StateComparison is the same load run with no store (memory) and with a
// durable one, in alternating rounds.
type StateComparison struct {
	Rounds int `json:"rounds"`
	// Baseline is what Memory ran with: "memory" (the embedded store in
	// memory) or "none" (no NATS store).
	Baseline string `json:"baseline"`
	// Memory and Durable are every run of each side in order; round i ran
	// Memory[i] and then Durable[i].
	Memory  []*Report `json:"memory"`
	Durable []*Report `json:"durable"`
	// ThroughputRatio is the median over the rounds of durable ÷ memory
	// proposals/s within a round (two runs back to back see about the same
	// load from other programs); CPURatio the same for the whole
	// process's CPU per proposal.
	ThroughputRatio float64 `json:"throughput_ratio"`
	CPURatio        float64 `json:"cpu_ratio"`
	Target          float64 `json:"throughput_ratio_target"`
}

// CompareState builds the comparison of rounds of a memory run and a
// durable run; memory and durable have one report per round.
func CompareState(baseline string, memory, durable []*Report) *StateComparison {
	target := DurableTarget
	if baseline == "none" {
		target = DurableVsNoneTarget
	}
	c := &StateComparison{Rounds: min(len(memory), len(durable)), Baseline: baseline, Memory: memory, Durable: durable, Target: target}
	var tput, cpu []float64
	for i := range c.Rounds {
		m, d := memory[i], durable[i]
		if m.Throughput > 0 {
			tput = append(tput, d.Throughput/m.Throughput)
		}
		if m.CPUPerProposal > 0 {
			cpu = append(cpu, d.CPUPerProposal/m.CPUPerProposal)
		}
	}
	c.ThroughputRatio, c.CPURatio = median(tput), median(cpu)
	return c
}

// median of vs (the lower middle one for an even count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	return vs[(len(vs)-1)/2]
}

// OK reports whether every run answered every proposal exactly once.
func (c *StateComparison) OK() bool {
	for _, r := range slices.Concat(c.Memory, c.Durable) {
		if !r.OK() {
			return false
		}
	}
	return c.Rounds > 0
}

// WriteText prints the reports of a single round in full, then a table
// of every run and what durability costs.
func (c *StateComparison) WriteText(w io.Writer) {
	if c.Rounds == 0 {
		return
	}
	if c.Rounds == 1 {
		c.Memory[0].WriteText(w)
		fmt.Fprintln(w)
		c.Durable[0].WriteText(w)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "the cost of durability: --state %s vs --state %s, same load, %d alternating round(s)\n", c.Baseline, c.Durable[0].State, c.Rounds)
	fmt.Fprintf(w, "  %5s %-8s %12s %10s %10s %14s %14s %11s %11s\n", "round", "state", "proposals/s", "p50", "p99", "CPU/proposal", "fulfiller CPU", "unanswered", "duplicates")
	d := func(v float64) time.Duration { return us(v).Round(time.Microsecond) }
	for i := range c.Rounds {
		for _, r := range []*Report{c.Memory[i], c.Durable[i]} {
			name := c.Baseline
			if r == c.Durable[i] {
				name = "durable"
			}
			fmt.Fprintf(w, "  %5d %-8s %12.0f %10v %10v %13.0fµs %13.0fµs %11d %11d\n", i+1, name, r.Throughput,
				d(r.Latency.P50), d(r.Latency.P99), r.CPUPerProposal, r.FulfillerCPUPerProposal, r.Unanswered, r.Duplicates)
		}
	}
	verdict := "met"
	if c.ThroughputRatio < c.Target {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "  durable ÷ %s (median of rounds): throughput %.2f× (target ≥ %.2f: %s), CPU per proposal %.2f×\n",
		c.Baseline, c.ThroughputRatio, c.Target, verdict, c.CPURatio)
}

// ToolStyleTarget is the least throughput a run whose tool owner answers
// as the reference SDK does (no JSON-RPC id) should keep of the same run
// with an id-echoing owner: the answer is matched by correlation either
// way, so the two should cost the same.
const ToolStyleTarget = 0.9

// ToolStyleComparison is the same load run with each tool style, in
// rounds: a second run in one process is slower than the first (the
// first's garbage, a warmer heap), so the rounds alternate which style
// goes first, and the ratio is the median of the rounds'.
type ToolStyleComparison struct {
	Rounds  int       `json:"rounds"`
	JSONRPC []*Report `json:"jsonrpc"`
	SDK     []*Report `json:"sdk"`
	// ThroughputRatio is the median over rounds of SDK throughput over
	// JSON-RPC throughput.
	ThroughputRatio float64 `json:"throughput_ratio"`
	Target          float64 `json:"throughput_ratio_target"`
}

// CompareToolStyles compares rounds of a run with an id-echoing tool owner
// and one with an SDK-style owner; jsonrpc and sdk have one report per
// round.
func CompareToolStyles(jsonrpc, sdk []*Report) *ToolStyleComparison {
	c := &ToolStyleComparison{Rounds: min(len(jsonrpc), len(sdk)), JSONRPC: jsonrpc, SDK: sdk, Target: ToolStyleTarget}
	var ratios []float64
	for i := range c.Rounds {
		if jsonrpc[i].Throughput > 0 {
			ratios = append(ratios, sdk[i].Throughput/jsonrpc[i].Throughput)
		}
	}
	c.ThroughputRatio = median(ratios)
	return c
}

// OK reports whether every run answered every proposal exactly once and
// refused no honest answer.
func (c *ToolStyleComparison) OK() bool {
	for _, r := range slices.Concat(c.JSONRPC, c.SDK) {
		if !r.OK() {
			return false
		}
	}
	return c.Rounds > 0
}

// WriteText prints the first round's reports in full, then each round's
// throughputs and the median ratio.
func (c *ToolStyleComparison) WriteText(w io.Writer) {
	if c.Rounds == 0 {
		return
	}
	c.JSONRPC[0].WriteText(w)
	fmt.Fprintln(w)
	c.SDK[0].WriteText(w)
	fmt.Fprintln(w)
	var timeouts, spoofs [2]int64
	for i := range c.Rounds {
		first := "jsonrpc"
		if i%2 == 1 {
			first = "sdk"
		}
		fmt.Fprintf(w, "round %d (%s first)  jsonrpc %.0f/s  sdk %.0f/s  ratio %.2f×\n", i+1, first,
			c.JSONRPC[i].Throughput, c.SDK[i].Throughput, c.SDK[i].Throughput/max(c.JSONRPC[i].Throughput, 1e-9))
		timeouts[0] += c.JSONRPC[i].FulfilTimeouts
		timeouts[1] += c.SDK[i].FulfilTimeouts
		spoofs[0] += c.JSONRPC[i].SpoofAttempts
		spoofs[1] += c.SDK[i].SpoofAttempts
	}
	verdict := "met"
	if c.ThroughputRatio < c.Target {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "sdk / jsonrpc   throughput %.2f× (median of %d rounds; target ≥ %.1f×: %s); fulfil timeouts %d / %d, spoof attempts %d / %d\n",
		c.ThroughputRatio, c.Rounds, c.Target, verdict, timeouts[1], timeouts[0], spoofs[1], spoofs[0])
}
