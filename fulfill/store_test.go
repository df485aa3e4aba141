package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/natstest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// Tests of Config.Store run on real NATS JetStream (state.Open): an
// embedded DIR or memory store for one member, a loopback server shared
// by several members for a group. Faults are injected by faultyStore,
// which cuts a member off its (real) store as a crash or an outage would.

// faultyStore is a member's real store that can be cut off: dead fails
// every call (a crashed process, an unreachable store); failUpdate fails
// the writes of a claimed record (Update, UpdateSoon) and a claim that
// carries a request or prompts (a member alone on its store claims with
// its decision, lifecycle.Config.Alone).
type faultyStore struct {
	*state.Store
	dead, failUpdate atomic.Bool
	// group, set before the fulfiller runs, makes the store say it is
	// shared (Shared), as a group's is: the claim is written before the
	// policy decides, and a crash can come between the two.
	group bool
	// dieAfterAnswered makes the store dead once a MarkAnswered succeeds.
	dieAfterAnswered atomic.Bool
	// dieAfterClaim makes the store and crashSpace dead once a claim is
	// written: a kill -9 right after the claim, before anything else.
	dieAfterClaim atomic.Bool
	crashSpace    *fakeSpace
	// recordLeft makes ClaimRecord write the record and then fail as a
	// store does that loses the seen key's write and the record's delete
	// (state.ErrRecordLeft).
	recordLeft atomic.Bool
	// beforeAnswered, when set before the fulfiller runs, is called as a
	// MarkAnswered starts: what a crash at that point would leave.
	beforeAnswered func(*lifecycle.Proposal)
	// beforeUpdate, when set before the fulfiller runs, is called as an
	// Update starts, like beforeAnswered.
	beforeUpdate func(*lifecycle.Proposal)
	// claimGate, when set before the fulfiller runs, holds every Claim
	// until a value is sent on it (a slow store).
	claimGate chan struct{}
	// scanAfterTake, scanListed and scanRelease, when set before the
	// fulfiller runs, time its start-up scan around an operator's take
	// (see Owned).
	scanAfterTake, scanListed, scanRelease chan struct{}
}

var errCut = errors.New("test: store connection cut")

// gate holds a claim until claimGate lets it through, and fails it on a
// dead store.
func (s *faultyStore) gate(ctx context.Context) error {
	if s.claimGate != nil {
		select {
		case <-s.claimGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.dead.Load() {
		return errCut
	}
	return nil
}

// Shared is the store's, or true when the store poses as a group's.
func (s *faultyStore) Shared() bool { return s.group || s.Store.Shared() }

func (s *faultyStore) ClaimRecord(ctx context.Context, p *lifecycle.Proposal) (bool, string, error) {
	if err := s.gate(ctx); err != nil {
		return false, "", err
	}
	if s.failUpdate.Load() && (p.Request != nil || len(p.Prompts) > 0) {
		return false, "", errCut
	}
	won, winner, err := s.Store.ClaimRecord(ctx, p)
	if s.recordLeft.Load() {
		return false, "", fmt.Errorf("%w: %w", state.ErrRecordLeft, errCut)
	}
	if err == nil && won {
		s.crashAfterClaim()
	}
	return won, winner, err
}

func (s *faultyStore) Reclaim(ctx context.Context, p *lifecycle.Proposal) (bool, error) {
	if s.dead.Load() {
		return false, errCut
	}
	return s.Store.Reclaim(ctx, p)
}

func (s *faultyStore) ClaimDecision(ctx context.Context, id, decision string) (bool, string, error) {
	if err := s.gate(ctx); err != nil {
		return false, "", err
	}
	won, winner, err := s.Store.ClaimDecision(ctx, id, decision)
	if err == nil && won {
		s.crashAfterClaim()
	}
	return won, winner, err
}

// crashAfterClaim kills the store (and crashSpace) if dieAfterClaim is set.
func (s *faultyStore) crashAfterClaim() {
	if !s.dieAfterClaim.Load() {
		return
	}
	s.dead.Store(true)
	if s.crashSpace != nil {
		s.crashSpace.dead.Store(true)
	}
}

func (s *faultyStore) Put(ctx context.Context, p *lifecycle.Proposal) error {
	if s.dead.Load() {
		return errCut
	}
	return s.Store.Put(ctx, p)
}

func (s *faultyStore) Update(ctx context.Context, p *lifecycle.Proposal) error {
	if s.beforeUpdate != nil {
		s.beforeUpdate(p)
	}
	if s.dead.Load() || s.failUpdate.Load() {
		return errCut
	}
	return s.Store.Update(ctx, p)
}

func (s *faultyStore) UpdateSoon(ctx context.Context, p *lifecycle.Proposal) error {
	if s.beforeUpdate != nil {
		s.beforeUpdate(p)
	}
	if s.dead.Load() || s.failUpdate.Load() {
		return errCut
	}
	return s.Store.UpdateSoon(ctx, p)
}

func (s *faultyStore) MarkAnswered(ctx context.Context, p *lifecycle.Proposal) error {
	if s.beforeAnswered != nil {
		s.beforeAnswered(p)
	}
	if s.dead.Load() {
		return errCut
	}
	err := s.Store.MarkAnswered(ctx, p)
	if err == nil && s.dieAfterAnswered.Load() {
		s.dead.Store(true) // a crash right after the reject was recorded, before it is written
	}
	return err
}

func (s *faultyStore) Delete(ctx context.Context, p *lifecycle.Proposal) error {
	if s.dead.Load() {
		return errCut
	}
	return s.Store.Delete(ctx, p)
}

func (s *faultyStore) Members(ctx context.Context) ([]state.MemberInfo, error) {
	if s.dead.Load() {
		return nil, errCut
	}
	return s.Store.Members(ctx)
}

func (s *faultyStore) List(ctx context.Context) ([]*lifecycle.Proposal, error) {
	if s.dead.Load() {
		return nil, errCut
	}
	return s.Store.List(ctx)
}

func (s *faultyStore) Adopt(ctx context.Context, from string) ([]*lifecycle.Proposal, error) {
	if s.dead.Load() {
		return nil, errCut
	}
	return s.Store.Adopt(ctx, from)
}

var spaces sync.Map // test name → its space

// testSpace names t's buckets: t.Name() and a number unique to this run of
// the test, so a repetition (-count) does not meet the last one's claims.
func testSpace(t *testing.T) string {
	if v, ok := spaces.Load(t); ok {
		return v.(string)
	}
	v, _ := spaces.LoadOrStore(t, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))
	return v.(string)
}

// openStore opens a store for member and closes it when the test ends.
func openStore(t *testing.T, mode state.Mode, member string, tune ...func(*state.Config)) *faultyStore {
	t.Helper()
	// Generous: creating five buckets is slow on a loaded 2-core machine
	// under -race.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Each test (and each -count repetition) has buckets of its own (the
	// server is shared); a test's members share them. One replica: the
	// shared server is standalone.
	cfg := state.Config{Mode: mode, Space: testSpace(t), Member: member, MaxPending: 100, Lease: time.Second, Replicas: 1}
	for _, f := range tune {
		f(&cfg)
	}
	st, err := state.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &faultyStore{Store: st}
}

// natsServer is a standalone JetStream server on loopback that a group's
// members share, started by the first test that needs it and shared by the
// package's tests (each has its own buckets); TestMain stops it. One
// server, not a cluster: these tests are about the members, and package
// state tests replication and node loss. Three raft servers under -race on
// a busy two-core machine stalled store calls past their 10s bound in CI.
func natsServer(t *testing.T) state.Mode {
	t.Helper()
	sharedNATS.once.Do(func() {
		sharedNATS.c, sharedNATS.err = natstest.StartCluster(1, "fulfill-test", natstest.Options{NoSync: true})
	})
	if sharedNATS.err != nil {
		t.Fatalf("start NATS server: %v", sharedNATS.err)
	}
	mode, err := state.ParseMode(sharedNATS.c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	return mode
}

var sharedNATS struct {
	once sync.Once
	c    *natstest.Cluster
	err  error
}

func TestMain(m *testing.M) {
	// Twice GOMAXPROCS tests at once: most of these tests wait (on the
	// gateway, leases, deadlines), each in a space and buckets of its own.
	testenv.MoreParallel()
	code := m.Run()
	if sharedNATS.c != nil {
		sharedNATS.c.Shutdown()
	}
	os.Exit(code)
}

// member is one fulfiller of a group on a fake space of its own (every
// envelope the test delivers to it is what the gateway broadcast).
type member struct {
	*harness
	st        *faultyStore
	stopLease context.CancelFunc
}

func newMember(t *testing.T, mode state.Mode, id string, cfg Config, dec *fakeDecider) *member {
	t.Helper()
	st := openStore(t, mode, id)
	leaseCtx, stopLease := context.WithCancel(context.Background())
	t.Cleanup(stopLease)
	if err := st.StartLease(leaseCtx); err != nil {
		t.Fatalf("lease: %v", err)
	}
	return &member{harness: newStoreHarness(t, id, st, cfg, dec), st: st, stopLease: stopLease}
}

// newStoreHarness runs a Fulfiller named id on store st; the calculator
// also offers "ask", which storeDecisions escalates, and "deny", for
// tests whose policy rejects it. With Config.Approvals, alice (who
// approves storeDecisions' escalations) is present.
func newStoreHarness(t *testing.T, id string, st *faultyStore, cfg Config, dec *fakeDecider) *harness {
	t.Helper()
	space := newFakeSpace()
	space.id = id
	space.tools["calculator"] = append(space.tools["calculator"], ToolInfo{Name: "ask", Description: "needs a human"}, ToolInfo{Name: "soon", Description: "needs a human soon"},
		ToolInfo{Name: "deny", Description: "a policy rejects it"},
		ToolInfo{Name: "migrate", Description: "runs as an MCP task", Execution: json.RawMessage(`{"taskSupport":"required"}`)})
	if cfg.Approvals != nil {
		space.setPresent("alice", true) // storeDecisions' approver
	}
	cfg.Store = st
	return newHarnessOn(t, space, cfg, dec)
}

// crash stops m as kill -9 would: nothing more reaches the wire or the
// store, and its lease is no longer renewed.
func (m *member) crash() {
	m.space.dead.Store(true)
	m.st.dead.Store(true)
	m.stopLease()
	m.shutdown()
}

// waitStage waits until the harness emitted stage for proposal id.
func (h *harness) waitStage(t *testing.T, id string, stage Stage) {
	t.Helper()
	if !poll.Within(poll.Limit, func() bool { return slices.Contains(h.stages(id), stage) }) {
		t.Fatalf("%s: no %s event within %s (stages %v)", id, stage, poll.Limit, h.stages(id))
	}
}

var storeDecisions = map[string]decision.Decision{
	"add": {Action: decision.Fulfill},
	"ask": {Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: time.Minute},
	// soon's prompt must outlive the escalation of "inflight" and the
	// crash of TestStoreRestartResumes, then expire while it is down: at
	// 300ms it expired before the crash at load 25.
	"soon":    {Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: 1500 * time.Millisecond},
	"migrate": {Action: decision.Fulfill},
}

func callOf(tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{"a":1}}}`, tool)
}

// sentKinds drains what was sent within d, by kind and correlation.
func drain(s *fakeSpace, d time.Duration) []agent.Envelope {
	var out []agent.Envelope
	timeout := time.After(d)
	for {
		select {
		case env := <-s.sent:
			out = append(out, env)
		case <-timeout:
			return out
		}
	}
}

func isToolsCall(env agent.Envelope) bool {
	var req agent.RPCRequest
	return env.Kind == agent.KindRequest && json.Unmarshal(env.Payload, &req) == nil && req.Method == "tools/call"
}
