package loadtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/fulfill/state"
)

// spin burns CPU until the process has used at least d more of it.
func spin(d time.Duration) (n uint64) {
	end := cpuTime() + d
	for cpuTime() < end {
		for i := range 100_000 {
			n += uint64(i) * n
		}
	}
	return n
}

// cpuByLabel reads what runtime/pprof writes: CPU burnt in a goroutine
// labelled busy is summed under busy, and unlabelled CPU under "".
func TestCPUByLabel(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skipf("CPU profile already running: %v", err)
	}
	done := make(chan struct{})
	labelled(context.Background(), "busy", func(context.Context) {
		go func() { defer close(done); spin(500 * time.Millisecond) }()
	})
	<-done
	spin(200 * time.Millisecond)
	pprof.StopCPUProfile()
	sums, err := cpuByLabel(buf.Bytes(), LabelKey)
	if err != nil {
		t.Fatal(err)
	}
	// At 100 Hz, 500 ms of CPU is ~50 samples; even losing most leaves
	// some. (No ratio is asserted: under -race on a busy machine the
	// runtime's own CPU counts towards the spin and the profile loses
	// samples unevenly.)
	if sums["busy"] <= 0 || sums[""] <= 0 {
		t.Fatalf("sums %v: want CPU both under busy and unlabelled", sums)
	}
	if _, err := cpuByLabel([]byte{0x1f, 0x8b, 1, 2}, LabelKey); err == nil {
		t.Error("a truncated gzip profile parsed")
	}
	if _, err := cpuByLabel([]byte{0x0a, 0x7f}, LabelKey); err == nil {
		t.Error("a truncated profile parsed")
	}
}

func smallConfig(n int) Config {
	return Config{
		Policies:  []string{"../../examples/policies"},
		Data:      []string{"../../examples/policies/data.yaml"},
		Proposals: n, Proposers: 2,
	}
}

// checkCPUFigures asserts what the bench promises about the fulfiller's
// own CPU: present, positive, below the whole process's, and the shares
// of the components add up to all of the profile.
func checkCPUFigures(t *testing.T, r Report) {
	t.Helper()
	if r.ProfileError != "" {
		t.Skipf("no profile: %s", r.ProfileError) // go test -cpuprofile holds the profiler
	}
	if !(r.FulfillerCPUPerProposal > 0 && r.FulfillerCPUPerProposal < r.CPUPerProposal) {
		t.Errorf("fulfiller CPU %.1fµs per proposal, process %.1fµs: want 0 < fulfiller < process", r.FulfillerCPUPerProposal, r.CPUPerProposal)
	}
	if !(r.FulfillerCPUProRata >= r.FulfillerCPUPerProposal && r.FulfillerCPUProRata < r.CPUPerProposal) || r.ProfiledCPUSeconds <= 0 {
		t.Errorf("pro rata %.1fµs, direct %.1fµs, process %.1fµs, profiled %.2fs: want direct ≤ pro rata < process and a profile",
			r.FulfillerCPUProRata, r.FulfillerCPUPerProposal, r.CPUPerProposal, r.ProfiledCPUSeconds)
	}
	var sum float64
	for _, c := range []string{ComponentFulfiller, ComponentSpace, ComponentTool, ComponentProposers, ComponentOther} {
		sum += r.CPUShare[c]
	}
	if len(r.CPUShare) > 5 || sum < 0.999 || sum > 1.001 {
		t.Errorf("shares %v: want the five components adding up to 1", r.CPUShare)
	}
	for _, c := range []string{ComponentSpace, ComponentTool} {
		if r.CPUShare[c] <= 0 {
			t.Errorf("shares %v: no CPU for %s, which relays or answers every proposal", r.CPUShare, c)
		}
	}
}

// The default run (no store) says so and reports the fulfiller's own CPU.
func TestRunReportsFulfillerCPU(t *testing.T) {
	var prof bytes.Buffer
	cfg := smallConfig(cpuProposals)
	cfg.CPUProfile = &prof
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if !r.OK() || r.State != "none" || r.StoreOps != nil {
		t.Fatalf("report %+v", r)
	}
	checkCPUFigures(t, r)
	// The profile handed out is the one the figures came from.
	sums, err := cpuByLabel(prof.Bytes(), LabelKey)
	if err != nil || sums[ComponentFulfiller] <= 0 {
		t.Errorf("written profile: %v, %v", sums, err)
	}
}

// With --state DIR the run works in a fresh store inside DIR and removes
// it: a second run on the same DIR starts from nothing (with the store
// wired into fulfill, a leftover store would make every proposal id of
// the second run "seen"), and nothing is left running.
func TestRunWithDirState(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"),
		goleak.IgnoreCurrent())
	dir := t.TempDir()
	for i := range 2 {
		cfg := smallConfig(100)
		cfg.State = &state.Mode{Kind: state.Dir, Dir: dir}
		// No proposer past its share of the fulfilment slots (a quarter
		// of 64): a call that waits for a slot is one more update.
		cfg.Window = 16
		res, err := Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Report
		if !r.OK() || r.State != dir {
			t.Fatalf("run %d: report %+v", i, r)
		}
		// Where durability's cost goes: one claim per proposal, written
		// with its decision (a fulfilment's request, synced; a reject),
		// and one delete; syncs shared by the fulfilments' claims.
		ops := r.StoreOps
		if !claimedWithDecisions(ops, r) || ops["sync"].Count < 1 || ops["sync"].Count > int(r.Outcomes["fulfilled"]) ||
			ops["syncfs"].Count < 1 || ops["claim"].P50 <= 0 {
			t.Errorf("run %d: store ops %+v for %d proposals, %d fulfilled", i, ops, r.Sent, r.Outcomes["fulfilled"])
		}
		left, err := os.ReadDir(dir)
		if err != nil || len(left) != 0 {
			t.Fatalf("run %d left %v in the state directory (%v)", i, left, err)
		}
	}
}

// With --state memory (bench's default) the run's fulfiller is run --state
// memory's, wired by internal/sidecar: every proposal is claimed in the
// store and every fulfilment request is recorded there before it goes
// out.
func TestRunWithMemoryStateGoesThroughTheStore(t *testing.T) {
	cfg := smallConfig(100)
	cfg.State = &state.Mode{Kind: state.Memory}
	cfg.Window = 16
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if !r.OK() || r.State != "memory" {
		t.Fatalf("report %+v", r)
	}
	if ops := r.StoreOps; !claimedWithDecisions(ops, r) || ops["sync"].Count != 0 {
		t.Errorf("store ops %+v for %d proposals, %d fulfilled: want a claim (with its decision) and a delete each, no sync", ops, r.Sent, r.Outcomes["fulfilled"])
	}
}

// claimedWithDecisions reports whether ops are those of a fulfiller alone
// on its store (lifecycle.Config.Alone): a claim and a delete per
// proposal, and at most one write between them. The claim carries the
// decision when the decision comes within ClaimHold (50 ms), which a
// loaded CI machine does not promise for every proposal: that the claim
// waits for it is the core's test (TestAloneClaimCarriesItsDecision, on
// its clock); how many did here is the bench's figure, not a bound.
// The ids go to the seen log, at most one write each (fewer when claims
// come together).
func claimedWithDecisions(ops map[string]Percentiles, r Report) bool {
	after := ops["update"].Count + ops["answered"].Count + ops["update_soon"].Count
	return ops["claim"].Count == int(r.Sent) && ops["delete"].Count == int(r.Sent) && after <= int(r.Sent) &&
		ops["seen"].Count >= 1 && ops["seen"].Count <= int(r.Sent)
}

// A state directory that cannot be made fails the run before any load,
// naming it.
func TestRunWithBadDirState(t *testing.T) {
	file := t.TempDir() + "/file"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig(10)
	cfg.State = &state.Mode{Kind: state.Dir, Dir: file}
	if _, err := Run(t.Context(), cfg); err == nil || !bytes.Contains([]byte(err.Error()), []byte(file)) {
		t.Fatalf("err %v: want one naming %s", err, file)
	}
}

// Against an external NATS server (here one on loopback) the run uses the
// bench's own space and ids unique per run, so a second run is not
// refused as replays of the first's ids.
func TestRunWithExternalState(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server did not start")
	}
	mode, err := state.ParseMode(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		cfg := smallConfig(100)
		cfg.State = &mode
		res, err := Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Report; !r.OK() || r.State != mode.String() {
			t.Fatalf("run %d: report %+v", i, r)
		}
	}
}

// The comparison's ratio is the median of the rounds' own ratios, and the
// text says when the durable store misses the target.
func TestCompareState(t *testing.T) {
	run := func(state string, tput, cpu float64) *Report {
		return &Report{State: state, Proposals: 10, Sent: 10, Answered: 10, Throughput: tput, CPUPerProposal: cpu}
	}
	c := CompareState("memory",
		[]*Report{run("memory", 1000, 100), run("memory", 500, 100), run("memory", 1000, 100)},
		[]*Report{run("/s", 600, 150), run("/s", 450, 120), run("/s", 100, 400)})
	if c.Rounds != 3 || c.ThroughputRatio != 0.6 || c.CPURatio != 1.5 || !c.OK() {
		t.Fatalf("rounds %d, throughput ratio %v (want 0.6 of 0.6, 0.9, 0.1), cpu ratio %v (want 1.5), ok %v",
			c.Rounds, c.ThroughputRatio, c.CPURatio, c.OK())
	}
	var b bytes.Buffer
	c.WriteText(&b)
	if !strings.Contains(b.String(), "durable ÷ memory (median of rounds): throughput 0.60× (target ≥ 0.70: MISSED), CPU per proposal 1.50×") {
		t.Errorf("text:\n%s", b.String())
	}
	// Against no store at all the target is issue 28's 0.9×.
	none := CompareState("none", []*Report{run("none", 1000, 100)}, []*Report{run("/s", 920, 110)})
	b.Reset()
	none.WriteText(&b)
	if !strings.Contains(b.String(), "--state none vs --state /s") || !strings.Contains(b.String(), "durable ÷ none (median of rounds): throughput 0.92× (target ≥ 0.90: met)") {
		t.Errorf("text against none:\n%s", b.String())
	}
	c.Durable[1].Unanswered = 1
	if c.OK() {
		t.Error("a comparison with an unanswered proposal is OK")
	}
}

// A run with HeapProfile hands out a heap profile taken before the store
// stops: the memory store's records are in it, which is what the profile
// is for (what the fulfiller and its store hold once everything is
// answered).
func TestRunWritesHeapProfile(t *testing.T) {
	// Every allocation sampled, so that even a small run's records show.
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	var heap bytes.Buffer
	cfg := smallConfig(50)
	cfg.State = &state.Mode{Kind: state.Memory}
	cfg.HeapProfile = &heap
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.OK() || res.Report.HeapProfileError != "" {
		t.Fatalf("report %+v", res.Report)
	}
	zr, err := gzip.NewReader(&heap)
	if err != nil {
		t.Fatalf("heap profile: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("heap profile: %v", err)
	}
	var strs []string
	if err := protoFields(raw, func(num, wire int, _ uint64, b []byte) error {
		if num == 6 && wire == 2 {
			strs = append(strs, string(b))
		}
		return nil
	}); err != nil {
		t.Fatalf("heap profile: %v", err)
	}
	for _, want := range []string{"inuse_space", "github.com/nats-io/nats-server/v2/server.(*memStore).storeRawMsg"} {
		if !slices.Contains(strs, want) {
			t.Errorf("heap profile does not name %s", want)
		}
	}
}

// The report says under which Go memory limit the run was made: it
// decides how much garbage the heap may hold, and so the peak RSS.
func TestRunReportsMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 30))
	res, err := Run(t.Context(), smallConfig(50))
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.MemoryLimit != 1<<30 {
		t.Errorf("memory limit in the report %d, want %d", res.Report.MemoryLimit, 1<<30)
	}
	var text bytes.Buffer
	res.Report.WriteText(&text)
	if !strings.Contains(text.String(), "Go memory limit 1024.0 MiB") {
		t.Errorf("text report does not give the limit:\n%s", text.String())
	}
}
