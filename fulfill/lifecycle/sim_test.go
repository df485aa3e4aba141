package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

var (
	flagSeed  = flag.Uint64("seed", 0, "TestSimulation: replay this one seed, printing its trace with -v")
	flagSeeds = flag.Int("seeds", 0, "TestSimulation: how many seeds to run (default 2000 with -short, 20000 without)")
	flagSteps = flag.Int("steps", 300, "TestSimulation: world steps per seed before the world quiesces")
)

// TestSimulation drives one or two group members, each a Core in the
// real Loop over fake adapters (simloop_test.go), through random
// schedules of proposals, withdrawals, tool and human answers, timers,
// store errors, crashes, restarts and member loss, and checks the
// invariants after every step. A failing seed prints the command that
// replays it.
func TestSimulation(t *testing.T) {
	if *flagSeed != 0 {
		if err := simulate(nil, *flagSeed, *flagSteps, testing.Verbose(), map[string]int{}); err != nil {
			t.Fatalf("seed %d: %v", *flagSeed, err)
		}
		return
	}
	n := *flagSeeds
	if n == 0 {
		n = 20000
		if testing.Short() {
			n = 2000
		}
	}
	// A seed's run depends on nothing but its number, so the seeds run
	// in parts side by side, one part a CPU, each part's seeds in turn
	// with its own coroutines: the wall time is divided, not the CPU.
	parts := min(runtime.GOMAXPROCS(0), n)
	partCovered := make([]map[string]int, parts)
	var failed atomic.Int32
	t.Run("seeds", func(t *testing.T) {
		for part := range parts {
			partCovered[part] = map[string]int{}
			t.Run(strconv.Itoa(part), func(t *testing.T) {
				t.Parallel()
				pool := &coroPool{}
				defer pool.close()
				for seed := uint64(1 + part); seed <= uint64(n) && failed.Load() < 3; seed += uint64(parts) {
					if err := simulate(pool, seed, *flagSteps, false, partCovered[part]); err != nil {
						t.Errorf("seed %d: %v\n  replay: go test ./fulfill/lifecycle -run 'TestSimulation$' -seed %d -v", seed, err, seed)
						failed.Add(1)
					}
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	covered := map[string]int{}
	for _, c := range partCovered {
		for k, v := range c {
			covered[k] += v
		}
	}
	// The schedules must reach every path the invariants are about; a
	// change to the world that stops reaching one fails here.
	var missing []string
	for _, k := range mustCover {
		if covered[k] == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d seeds never reached: %v", n, missing)
	}
	for _, k := range slices.Sorted(maps.Keys(covered)) {
		t.Logf("%-32s %d", k, covered[k])
	}
}

// mustCover are the paths (decision-log stages and reasons, and world
// events) that the seeds of one run must reach.
var mustCover = []string{
	"fulfilled", "queued", "approved", "withdrawn", "resumed", "escalated",
	"rejected/timeout", "rejected/disagree", "rejected/invalid", "rejected/busy", "rejected/incapable",
	"rejected/policy", "rejected/other",
	"ignored/duplicate", "ignored/adopted_elsewhere", "ignored/spoofed_withdraw", "ignored/forged_answer",
	"ignored/response_from_other", "ignored/wrong_rpc_id", "ignored/late_withdraw", "ignored/store_unavailable",
	"world/crash", "world/adopt", "world/release", "world/ambiguous_write", "world/reload", "world/shutdown",
	"world/resent_reject", "world/edit_rechecked", "world/cancel", "world/take", "ignored/cancel_refused",
	"world/claim_only", "world/busy_lost", "busy/the limit per proposer", "busy/the group's pending work", "busy/bytes (the limit)",
	"busy/proposals are pending (the limit)",
	"world/owner_left", "world/owner_back", "world/request_lost", "world/held", "world/held_released", "world/held_incapable",
	"world/left_incapable", "world/answered_after_rejoin",
	"world/task", "world/task_status", "world/task_relayed", "world/relay_no_task", "world/task_gone", "world/task_cancelled",
	"world/task_withdrawn", "world/resent_relay", "task", "rejected/timeout/task", "world/other_answered", "world/task_not_superseded",
	"status/escalated", "status/queued", "status/task",
	"world/slot_share",
	"world/turns",
	"world/claim_winner", "world/decided_before_claim", "world/early_decision_dropped", "world/claim_carries_decision", "world/carried_claim_landed", "world/claim_hold_lapsed", "world/unlogged/fulfilling", "world/unlogged/escalated", "world/request_away", "world/request_refused",
	"rejected/other/unlogged", "rejected/other/refused",
	// The core's escalation.
	"human/asked", "human/asked_again", "human/answered", "human/delegated", "human/reminded", "human/escalated",
	"human/forgery", "human/ignored", "human/skipped", "human/step_dropped", "human/cancelled", "human/opened",
	"human/ended/approved", "human/ended/disagree", "human/ended/incapable", "human/ended/timeout", "human/ended/other",
	"human/ended/cancelled", "world/keys_changed", "world/approver_left", "world/approver_back", "world/prompt_unsent",
	"world/delegated", "world/grant",
	// The Loop's own paths: ids reserved (and a reservation failed),
	// Immediate writes, reads retried, a lane's effects dropped at a
	// release or a CancelAsk, a follower stopped, a new roster.
	"world/reserved", "world/reserve_failed", "world/waits_for_ids", "world/immediate_write", "world/immediate_send", "world/read_failed",
	"world/owned_failed", "world/pruned_released", "world/pruned_ask", "world/follower_stopped", "world/reconnect",
}

// frame is an envelope on the simulated wire (the gateway broadcasts
// everything to everyone).
type frame struct {
	seq                  int
	kind                 string // proposal withdraw reject request cancel prompt prompt_cancel response answer
	id, from, to, corr   string
	pid                  string // the proposal it is about (the checker's bookkeeping)
	reason               string
	rpc                  int64
	hasRPC               bool
	action               AnswerAction
	approve, verified    bool
	params               json.RawMessage
	invalid              string
	member               string // sent by this group member
	inc                  int
	approver, promptPoll string
	leaves               int             // the tool owner's leaves before this frame
	lost                 bool            // a request written while its owner was away
	task                 bool            // a task-augmented request
	taskID, status       string          // a task handle, a task_cancel's task, a relay's task
	result               string          // a relay's result, a response's
	payload              json.RawMessage // a prompt's, an answer's (the core's escalation)
	// began is what the world knew when the member's Loop began the
	// send (onWire's checks of what may not go out after a proposal's
	// end): a send being made when its proposal ends still goes out.
	began began
}

// began is what the world knew of a proposal as a member's Loop began a
// send about it: whether the member had taken its withdrawal, whether
// the withdrawal was durable, whether the proposer had its answer, and
// (for a prompt) whether the member's record held the prompt.
type began struct {
	withdrawnHere, durableWd, answered, recorded, rejected bool
}

// beginning is what the world knows as m's Loop begins sending f.
func (s *sim) beginning(m *member, f frame) began {
	b := began{withdrawnHere: m.withdrawnHere[f.pid], answered: s.views[f.pid].answered()}
	if t := s.truth[f.pid]; t != nil {
		b.durableWd = t.durableWd
	}
	if f.kind == "request" {
		b.rejected = s.logged(f.pid, "rejected", "")
	}
	if f.kind == "prompt" {
		var r *Proposal
		if st := s.store.recs[f.pid]; st != nil {
			r = st.look()
		}
		b.recorded = r != nil && r.Owner == m.id && slices.ContainsFunc(r.Prompts, func(p Prompt) bool { return p.EnvelopeID == f.id })
	}
	return b
}

// wtask is a task at the tool owner.
type wtask struct {
	pid, request string
	status       string // working, input_required, completed, failed, cancelled
	result       string
	gone         bool // the owner forgot it (tasks/get: not found)
}

func (t *wtask) ended() bool {
	return t.gone || t.status == "completed" || t.status == "failed" || t.status == "cancelled"
}

type member struct {
	id      string
	core    *Core
	alive   bool
	closing bool
	inc     int
	inbox   []frame
	// sh is this incarnation's shell: the Loop that runs core.
	sh *shell
	// withdrawnHere: this incarnation ended the proposal as withdrawn.
	withdrawnHere map[string]bool
	// fresh are the fulfilments this incarnation committed (not resumed):
	// they hold slots within the limits.
	fresh map[*entry]bool
	// starts counts the queued proposals started; waitFrom is, by
	// proposer with queued proposals, the count when it began to wait;
	// lastStart the count at its last start (checkTurns).
	starts    int
	waitFrom  map[string]int
	lastStart map[string]int
	// group is the group's load as this incarnation was last told it
	// (GroupLoad), counted by the simulator: admissions are checked
	// against it.
	group groupView
	owner presence
}

type groupView struct{ pending, capacity int }

// presence is what a member last heard of the tool owner (fs): away
// since when. The core's own view must agree with it.
type presence struct {
	away  bool
	since time.Time
	// first is the first leave this incarnation heard. A grace runs
	// from a leave and is not restarted by the next one (an owner back
	// and gone again keeps the grace it had, as in fulfill's ownerLeft),
	// so an "incapable" may come sooner than a grace after the last.
	first time.Time
}

type stored struct {
	data []byte // the record as JSON: persisted as is
	rev  uint64
	// What the world itself looks at, kept as the record is stored, so
	// that it does not decode every record each time: its owner, phase
	// and counts of prompts and approvals. A Loop reads data afresh, as
	// from a store.
	owner              string
	phase              Phase
	prompts, approvals int
	// seen is data decoded once (look).
	seen *Proposal
}

// store keeps r, encoded as data, at rev.
func (st *simStore) put(r *Proposal, data []byte, rev uint64) {
	st.recs[r.ID] = &stored{data: data, rev: rev, owner: r.Owner, phase: r.Phase, prompts: len(r.Prompts), approvals: len(r.Approvals)}
}

// look is the record decoded, to be read and not changed.
func (st *stored) look() *Proposal {
	if st.seen == nil {
		st.seen = &Proposal{}
		if err := json.Unmarshal(st.data, st.seen); err != nil {
			panic(err)
		}
	}
	return st.seen
}

type simStore struct {
	recs    map[string]*stored
	claimed map[string]string // proposal id → decision id of the claim
	rev     uint64
}

// truth is what the world knows of one proposal.
type truth struct {
	from         string
	policy       string
	invalid      bool
	requests     []frame
	rejects      []frame
	cancels      map[string]bool // fulfilment request envelope ids cancelled
	claimed      bool
	claimID      string
	durableWd    bool // a withdrawal whose record delete was written
	prompts      map[string]frame
	promptEnded  map[string]bool // cancelled, or answered by its approver
	decisionIDs  map[string]bool // ids its answers may carry
	withdrawSent bool
	accepts      map[string]bool // approvers who sent a signed accept
	size         int             // the proposal's frame bytes
	// claimOnly: its claim was a ClaimOnly one (refused at once, no
	// record); busyLost: the member that won that claim crashed before
	// its reject went out. That proposal is left without an answer by
	// design (see Write.ClaimOnly): the one case final exempts.
	claimOnly, busyLost bool
	// task: its call goes out task-augmented, the task bounded by
	// taskTimeout (0: the Config's).
	task        bool
	taskTimeout time.Duration
	// otherAnswered: an approver answered the proposer directly (its
	// own mcp/reject): the proposer has an answer that is not ours.
	otherAnswered bool
	grantable     bool // its decision offers a grant
}

type sim struct {
	rng      *rand.Rand
	now      time.Time
	step     int
	cfg      Config
	members  []*member
	store    simStore
	wire     []frame
	truth    map[string]*truth
	order    []string // proposal ids in the order they were made
	ids      int
	failRate float64
	trace    []string
	verbose  bool
	lines    []Line
	views    map[string]*view
	decided  map[string]Action // decision id → action of its decided line
	// answers the world's actors settled on, so that a re-asked prompt
	// or a re-sent request gets the same answer.
	toolPlan   map[string]string
	promptPlan map[string]string
	quiescing  bool
	crowd      bool // three proposers, most calls allowed, few slots
	// ownerAway: the tool owner (fs) is not in the space; leaves counts
	// its leaves. A request written while it is away is lost (the
	// gateway replays nothing), and it answers only while present.
	ownerAway bool
	leaves    int
	// tasks at the owner, by task id; durableTasks are those a record in
	// phase Task held (proposal by task id).
	tasks        map[string]*wtask
	durableTasks map[string]string
	unwritten    map[string]bool // relay envelopes whose write failed
	violation    error           // the first invariant broken since the last check
	covered      map[string]int
	// neverSent are the requests whose fulfilling line the log could
	// not write (Unlogged): none may reach the wire. againIDs are the
	// decision ids the re-checks of edited calls were asked with.
	neverSent map[string]bool
	againIDs  map[string]bool
	away      map[string]bool // requests the wire found their owner away for (ErrAway)
	// approversAway: approvers not in the space (a prompt written to
	// one is lost); keyed: those whose
	// answers must be signed (KeysChanged toggles carol).
	approversAway map[string]bool
	keyed         fakeKeys
	// cur is the shell's coroutine running (nil: the world runs);
	// later is what the world does once it waits again.
	// pool is where the shells' coroutines come from.
	pool  *coroPool
	cur   *coro
	later []func()
	// storeNow, journalNow, wireNow: the members' writes (alone on the
	// store), lines and sends (requests, rejects, relays, cancels) are
	// Immediate, carried out on the Loop's goroutine.
	storeNow, journalNow, wireNow bool
	// reserved are the JSON-RPC ids handed out by ReserveIDs (the last
	// nextReserved); rpcOwner the envelope each id went out in.
	nextReserved int64
	reserved     map[int64]bool
	rpcOwner     map[int64]string
}

type simIDs struct {
	s      *sim
	member string
}

func (i simIDs) EnvelopeID() string { i.s.ids++; return fmt.Sprintf("%s-e%d", i.member, i.s.ids) }
func (i simIDs) RPCID() int64       { i.s.ids++; return int64(i.s.ids) }
func (i simIDs) DecisionID() string { i.s.ids++; return fmt.Sprintf("d%d", i.s.ids) }

// PromptID is random (from the seed's generator): nothing the world
// does may depend on guessing it.
func (i simIDs) PromptID() string { return fmt.Sprintf("%s-q%016x", i.member, i.s.rng.Uint64()) }

var errUnavailable = errors.New("store unavailable")

// simulate runs one seed: steps of the world, then its quiescence; with
// verbose, it prints its trace when an invariant breaks.
func simulate(pool *coroPool, seed uint64, steps int, verbose bool, covered map[string]int) error {
	_, err := runSim(pool, seed, steps, verbose, covered)
	return err
}

// runSim runs one seed and returns its world (with verbose, its trace).
// Its shells' coroutines come from pool and go back to it (nil: a pool
// of its own).
func runSim(pool *coroPool, seed uint64, steps int, verbose bool, covered map[string]int) (_ *sim, err error) {
	if pool == nil {
		pool = &coroPool{}
		defer pool.close()
	}
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		truth: map[string]*truth{}, views: map[string]*view{}, covered: covered, verbose: verbose, decided: map[string]Action{},
		toolPlan: map[string]string{}, promptPlan: map[string]string{}, tasks: map[string]*wtask{}, durableTasks: map[string]string{}, unwritten: map[string]bool{},
		store:     simStore{recs: map[string]*stored{}, claimed: map[string]string{}},
		neverSent: map[string]bool{}, againIDs: map[string]bool{}, away: map[string]bool{},
		nextReserved: 1 << 20, reserved: map[int64]bool{}, rpcOwner: map[int64]string{}, pool: pool}
	s.cfg = Config{MaxPending: 1 + s.rng.IntN(8), MaxInflight: 1 + s.rng.IntN(3), PendingTTL: 60 * time.Second,
		FulfillTimeout: 30 * time.Second, ApprovalTimeout: 45 * time.Second, RetryAfter: time.Second, Approvers: []string{"alice"},
		OwnerRejoinGrace: 5 * time.Second, TaskTimeout: 40 * time.Second, UnloggedMessage: unloggedMessage}
	// Admission limits: a seed in three runs with a small per-proposer
	// or byte bound (proposals are 64 to 512 bytes), so that each is hit.
	if s.rng.IntN(3) == 0 {
		s.cfg.MaxPendingPerProposer = 1 + s.rng.IntN(3)
	}
	if s.rng.IntN(3) == 0 {
		s.cfg.MaxPendingBytes = int64(400 + s.rng.IntN(1200))
	}
	// A seed in three with a per-proposer share of the slots; one in
	// five crowded: few slots, many proposers' calls.
	if s.rng.IntN(3) == 0 {
		s.cfg.MaxInflightPerProposer = 1 + s.rng.IntN(2)
	}
	if s.crowd = s.rng.IntN(5) == 0; s.crowd {
		s.cfg.MaxPending, s.cfg.MaxPendingPerProposer, s.cfg.MaxPendingBytes = 12, 0, 0
		s.cfg.MaxInflight = 1 + s.rng.IntN(2)
	}
	s.cfg.StatusChats = s.rng.IntN(2) == 0
	// JSON-RPC ids reserved ahead in a seed in three (a small block, so
	// that it runs out and is topped up).
	if s.rng.IntN(3) == 0 {
		s.cfg.ReserveIDs = 2 + s.rng.IntN(4)
	}
	s.journalNow = s.rng.IntN(3) == 0
	// The sends are Immediate (as the MCP front end's are) in a seed in
	// two, drawn from the seed itself: the seeds' other draws stay what
	// they were.
	s.wireNow = seed%2 == 1
	s.approversAway = map[string]bool{}
	{
		// The core's escalation: its codec, approvers' keys (alice
		// signs; carol's key comes and goes), grants offered in some
		// seeds, an approver away at start in some.
		s.cfg.Codec = fakeCodec{}
		s.keyed = fakeKeys{"alice"}
		s.cfg.Keys = s.keyed
		s.cfg.OfferGrants = s.rng.IntN(2) == 0
		if s.rng.IntN(4) == 0 {
			s.approversAway[[]string{"alice", "bob", "carol"}[s.rng.IntN(3)]] = true
		}
	}
	nMembers := 1 + s.rng.IntN(2)
	// A member by itself runs alone on its store (as an embedded one):
	// what its store could not claim it answers all the same. Its
	// writes are Immediate in a seed in two, as an in-process store's.
	s.cfg.Alone = nMembers == 1
	s.storeNow = s.cfg.Alone && s.rng.IntN(2) == 0
	defer func() {
		// Every coroutine ends with its seed.
		for _, m := range s.members {
			if m.sh != nil {
				m.sh.kill(false)
			}
		}
	}()
	for i := range nMembers {
		m := &member{id: fmt.Sprintf("m%d", i+1)}
		s.members = append(s.members, m)
		s.start(m)
	}
	defer func() {
		if err != nil && verbose {
			fmt.Fprintln(os.Stderr, strings.Join(s.trace, "\n"))
		}
	}()
	for s.step = 0; s.step < steps; s.step++ {
		s.act()
		if err := s.check(); err != nil {
			return s, fmt.Errorf("step %d: %w", s.step, err)
		}
	}
	return s, s.quiesce()
}

// A seed replays exactly: the Loop's goroutines run one at a time in
// the order the seed draws, so the same seed makes the same trace
// (every step, call, frame and line), which is what -seed N -v relies on.
func TestSimulationReplays(t *testing.T) {
	// The second run's coroutines come from a pool that ran seeds
	// before: what a coroutine did before must not change the trace.
	pool := &coroPool{}
	defer pool.close()
	for seed := uint64(1); seed <= 20; seed++ {
		a, err := runSim(nil, seed, *flagSteps, true, map[string]int{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		b, _ := runSim(pool, seed, *flagSteps, true, map[string]int{})
		if i := slices.Compare(a.trace, b.trace); i != 0 {
			n := 0
			for n < min(len(a.trace), len(b.trace)) && a.trace[n] == b.trace[n] {
				n++
			}
			t.Fatalf("seed %d ran twice: the traces part at line %d of %d and %d:\n%s\n%s", seed, n, len(a.trace), len(b.trace),
				strings.Join(a.trace[n:min(n+3, len(a.trace))], "\n"), strings.Join(b.trace[n:min(n+3, len(b.trace))], "\n"))
		}
		if len(a.trace) < *flagSteps {
			t.Fatalf("seed %d traced %d lines", seed, len(a.trace))
		}
	}
}

func (s *sim) tracef(format string, args ...any) {
	if s.verbose {
		s.trace = append(s.trace, fmt.Sprintf("%4d %s ", s.step, s.now.Format("15:04:05"))+fmt.Sprintf(format, args...))
	}
}

// start (re)starts m with empty memory, resuming its records.
func (s *sim) start(m *member) {
	m.inc++
	m.alive = true
	m.closing = false
	m.inbox = nil
	m.withdrawnHere = map[string]bool{}
	m.fresh = map[*entry]bool{}
	m.starts, m.waitFrom, m.lastStart = 0, map[string]int{}, map[string]int{}
	cfg := s.cfg
	cfg.Member = m.id
	m.core = New(cfg, simIDs{s, m.id})
	m.group = groupView{}
	m.owner = presence{}
	s.tracef("%s starts (incarnation %d)", m.id, m.inc)
	// Its Loop reads its records from before (Store.Owned) beside what
	// it is posted: its welcome's roster and the keys.
	m.sh = s.newShell(m, m.core)
	{
		var present []string
		for _, a := range []string{"alice", "bob", "carol"} {
			if !s.approversAway[a] {
				present = append(present, a)
			}
		}
		s.deliver(m, Roster{Present: present})
		s.deliver(m, KeysChanged{Keys: s.keyed})
	}
	if s.ownerAway {
		// The roster of its welcome: the owner is not in it.
		s.hear(m, frame{kind: "leave", from: "fs"})
	}
}

func (s *sim) owned(member string) []Proposal {
	var out []Proposal
	for _, id := range slices.Sorted(maps.Keys(s.store.recs)) {
		st := s.store.recs[id]
		if st.owner != member {
			continue
		}
		var p Proposal
		if err := json.Unmarshal(st.data, &p); err != nil {
			panic(err)
		}
		p.Rev = st.rev
		out = append(out, p)
	}
	return out
}

// deliver posts ev to m's Loop (Loop.Post), which takes it and applies it
// (stepped) before deliver returns.
func (s *sim) deliver(m *member, ev Event) {
	if _, ok := ev.(Proposed); ok {
		m.sh.proposed++
	}
	if err := m.sh.loop.Post(m.sh.ctx, ev); err != nil {
		panic(fmt.Sprintf("%s: post %T: %v", m.id, ev, err))
	}
}

// eventString is ev for a trace: its type, and the proposal it is about.
func eventString(ev Event) string {
	switch ev := ev.(type) {
	case Fired:
		return fmt.Sprintf("Fired %s kind %d at %s", ev.ID, ev.Kind, ev.At.Format("15:04:05"))
	case Stored:
		return fmt.Sprintf("Stored %s seq %d rev %d err %v", ev.ID, ev.Seq, ev.Rev, ev.Err)
	case Resumed:
		return fmt.Sprintf("Resumed %d records (%s)", len(ev.Records), ev.How)
	}
	v := reflect.ValueOf(ev)
	if f := v.FieldByName("ID"); f.IsValid() && f.Kind() == reflect.String {
		return fmt.Sprintf("%T %s", ev, f.String())
	}
	return fmt.Sprintf("%T", ev)
}

// stepped is m's Core.Step as its Loop applies ev, with the invariants
// checked around it: what changed in the core, and the effects it made.
func (s *sim) stepped(m *member, c *Core, now time.Time, ev Event) []Effect {
	if c != m.core {
		panic(fmt.Sprintf("%s steps a core not its own", m.id))
	}

	type before struct {
		held, sending bool
		outcome       Outcome
		task          bool // running a task not ended at its owner
	}
	was := map[string]before{}
	prev := map[string]*entry{}
	fulfilling, queued := map[*entry]bool{}, map[*entry]bool{}
	for id, e := range m.core.props {
		was[id] = before{e.req.held(), e.p.Phase == Fulfilling && !e.req.held(), e.outcome, e.p.Phase == Task && !e.req.taskDone}
		prev[id] = e
		fulfilling[e] = e.outcome == Open && e.p.Phase == Fulfilling
		queued[e] = e.outcome == Open && e.p.Phase == Queued
	}
	s.notSuperseded(m, ev)
	s.heard(m, ev)
	var early *entry
	if d, ok := ev.(Decided); ok {
		if e := m.core.props[d.ID]; e != nil && !e.claim.landed() && e.decide.state != decideNone {
			s.covered["world/decided_before_claim"]++ // Alone: decided beside the claim
			early = e
		}
	}
	if f, ok := ev.(Fired); ok && f.Kind == TimerHold {
		if e := m.core.props[f.ID]; e != nil && e.claim.state == claimHeld {
			s.covered["world/claim_hold_lapsed"]++ // the decision follows the claim
		}
	}
	var carried map[string]bool // proposals whose claim carries their decision, before the step
	for id, e := range m.core.props {
		if e.carrying() {
			if carried == nil {
				carried = map[string]bool{}
			}
			carried[id] = true
		}
	}
	effs := m.core.Step(now, ev)
	if s.verbose {
		s.tracef("  %s steps %s: %v", m.id, eventString(ev), kinds(effs))
	}
	if early != nil && !early.claim.landed() {
		for _, e := range effs {
			if l, ok := e.(Log); ok && (l.Line.Stage == "decided" || l.Line.Stage == "fulfilling" || l.Line.Stage == "rejected") {
				s.fail("%s logged %s for %s before its claim landed", m.id, l.Line.Stage, early.p.ID)
			}
		}
		if early.carrying() {
			s.covered["world/claim_carries_decision"]++
		}
	}
	if st, ok := ev.(Stored); ok {
		e := prev[st.ID]
		if e != nil && (e.claim.decided != nil || carried[st.ID]) && m.core.props[st.ID] != e {
			s.covered["world/early_decision_dropped"]++ // the claim lost: its decision never logged
		}
		if e != nil && carried[st.ID] && e.claim.landed() {
			s.covered["world/carried_claim_landed"]++
		}
	}
	s.checkSlots(m, prev, fulfilling)
	s.checkTurns(m, queued)
	s.checkAsks(m, ev, effs)
	for id, e := range m.core.props {
		if e.req.held() {
			s.covered["world/held"]++
		} else if was[id].held && e.outcome == Open {
			s.covered["world/held_released"]++
		}
		if e.outcome == Open && e.p.Phase == Fulfilling && !e.req.held() && !was[id].sending && e.req.state != reqOut {
			s.checkOwnerCommit(m, e.p)
		}
		if _, resumed := ev.(Resumed); !resumed {
			// A resumed record's reject was committed by whoever wrote
			// it, and checked then, against what it had heard.
			if w, ok := was[id]; ok && w.outcome == Open && e.outcome == Rejected {
				s.checkOwnerReject(m, e.p, e.req.state == reqOut)
			}
		}
		if w, ok := was[id]; ok && w.outcome == Open && w.task && e.outcome != Open {
			s.checkTaskEnd(m, e, effs)
		}
	}
	for id, w := range was {
		if _, ok := m.core.props[id]; !ok && w.outcome == Open && w.task &&
			!slices.ContainsFunc(effs, func(x Effect) bool { c, ok := x.(CancelTask); return ok && c.ID == id }) {
			s.fail("%s let go of %s, running a task, without a CancelTask", m.id, id)
		}
	}
	// What this incarnation took in memory: its line comes only once
	// the withdrawal is written.
	for id, e := range m.core.props {
		if e.outcome == Withdrawn {
			m.withdrawnHere[id] = true
		}
	}
	if st, ok := ev.(Stored); ok && winner(st.Err) != "" {
		for _, e := range effs {
			if l, ok := e.(Log); ok && l.Line.Stage == "ignored" && l.Line.Reason == "duplicate" {
				s.covered["world/claim_winner"]++
				if l.Line.DecisionID != winner(st.Err) || l.Line.DecisionID != s.truth[st.ID].claimID {
					s.fail("%s's lost claim of %s logged under %q, the winner's %q (claimed as %q)", m.id, st.ID, l.Line.DecisionID, winner(st.Err), s.truth[st.ID].claimID)
				}
			}
		}
	}
	for _, e := range effs {
		if w, ok := e.(Write); ok && w.Create && !w.ClaimOnly {
			if p, ok := ev.(Proposed); ok && p.ID == w.ID && p.Invalid == "" {
				s.admitted(m, w.ID)
			}
		}
		switch e := e.(type) {
		case Log:
			// What the incarnation took in memory counts at once; the
			// line itself is written in order with the proposal's other
			// effects, and a crash may lose it.
			l := e.Line
			if t := s.truth[l.ProposalID]; t != nil && t.claimOnly && l.Stage == "withdrawn" {
				// No record to delete: a withdrawal taken after a
				// ClaimOnly claim is durable at once (nobody can resume
				// the proposal), its line or not.
				t.durableWd = true
			}
			if l.Stage == "resumed" || (l.Stage == "ignored" && l.Reason == "adopted_elsewhere") {
				// Its record was another member's (or is read again):
				// what the record holds stands; a withdrawal taken here
				// that still applies is taken again (and logged again).
				delete(m.withdrawnHere, l.ProposalID)
			}
		case Human:
			s.covered["human/"+string(e.Kind)]++
			if e.Kind == HumanEnded {
				s.covered["human/ended/"+e.Outcome]++
			}
		case CancelAsk:
			// The Loop drops the prompts and status chats of the
			// proposal not begun yet (this step's own are behind it).
			if m.sh.queued(e.ID, func(q Effect) bool {
				switch q.(type) {
				case SendPrompt, Status:
					return true
				}
				return false
			}) {
				s.covered["world/pruned_ask"]++
			}
		}
	}
	return effs
}

func (s *sim) fail(format string, args ...any) {
	if s.violation == nil {
		s.violation = fmt.Errorf(format, args...)
	}
}

// act takes one random step of the world.
func (s *sim) act() {
	for {
		switch r := s.rng.IntN(100); {
		case r < 10:
			if s.propose() {
				return
			}
		case r < 14:
			if s.withdraw() {
				return
			}
		case r < 22:
			if s.toolAnswers() {
				return
			}
		case r < 26:
			if s.rng.IntN(3) == 0 && s.otherAnswers(true) {
				return
			}
			if s.taskProgress() {
				return
			}
		case r < 34:
			_ = s.rng.IntN(2)
			if s.approverAnswers() {
				return
			}
		case r < 55:
			if s.deliverFrame() {
				return
			}
		case r < 85:
			if s.runOp() {
				return
			}
		case r < 93:
			if s.fireTimer() {
				return
			}
		case r < 95:
			if s.rng.IntN(3) == 0 && s.crash() {
				return
			}
		case r < 96:
			if s.restart() {
				return
			}
		case r < 97:
			if s.rng.IntN(4) == 0 && s.shutdown() {
				return
			}
		case r < 98:
			if s.rng.IntN(2) == 0 && s.loseMember() {
				return
			}
			if s.rng.IntN(2) == 0 && s.groupLoad() {
				return
			}
			if s.rng.IntN(2) == 0 && s.ownerMoves() {
				return
			}
			if s.rng.IntN(3) == 0 && s.otherAnswers(false) {
				return
			}
			if s.rng.IntN(2) == 0 && s.approverMoves() {
				return
			}
			if s.rng.IntN(4) == 0 && s.keysChange() {
				return
			}
			if s.rng.IntN(4) == 0 && s.reconnect() {
				return
			}
			if s.operatorCancels() {
				return
			}
		default:
			if s.failRate == 0 {
				s.failRate = 0.3
			} else {
				s.failRate = 0
			}
			s.tracef("store failure rate %.1f", s.failRate)
			return
		}
	}
}

// unloggedMessage is the simulated members' Config.UnloggedMessage.
const unloggedMessage = "the decision log cannot be written"

func (s *sim) broadcast(f frame) {
	if f.kind == "request" && s.neverSent[f.id] {
		s.fail("request %s of %s written though its fulfilling line was not", f.id, f.pid)
	}
	f.seq = len(s.wire)
	f.leaves = s.leaves
	if f.kind == "request" && s.ownerAway {
		// Nobody to deliver it to, and the gateway replays nothing.
		s.toolPlan[f.id] = "never"
		f.lost = true
		s.covered["world/request_lost"]++
	}
	s.wire = append(s.wire, f)
	for _, m := range s.members {
		if m.id == f.member {
			s.onWire(f, m)
		}
	}
	for _, m := range s.members {
		if m.alive && m.id != f.member {
			m.inbox = append(m.inbox, f)
		}
	}
	s.tracef("  wire %s %s from %s to %s corr %s reason %s", f.kind, f.id, f.from, f.to, f.corr, f.reason)
}

var policies = []string{"fulfill", "fulfill", "fulfill", "reject", "escalate", "escalate", "escalate2", "incapable"}

// corePolicies are the richer escalations (quorum of three, reminders
// and tiers, grants), drawn besides policies.
var corePolicies = []string{"escalate3", "escalate-tier", "escalate-grant"}

// policyQuorum is the approvals each policy's escalation needs.
var policyQuorum = map[string]int{"escalate": 1, "escalate2": 2, "escalate3": 2, "escalate-tier": 1, "escalate-grant": 1}

func (s *sim) propose() bool {
	if s.quiescing {
		return false
	}
	if len(s.order) > 0 && s.rng.IntN(8) == 0 {
		id := s.order[s.rng.IntN(len(s.order))]
		t := s.truth[id]
		s.tracef("proposer replays %s", id)
		s.broadcast(frame{kind: "proposal", id: id, from: t.from, pid: id, params: policyParams(t.policy), invalid: invalidWhy(t.invalid)})
		return true
	}
	if len(s.order) >= 12 {
		return false
	}
	id := fmt.Sprintf("p%d", len(s.order)+1)
	from, policy := []string{"coder", "coder2"}[s.rng.IntN(2)], policies[s.rng.IntN(len(policies))]
	if s.rng.IntN(3) == 0 {
		policy = corePolicies[s.rng.IntN(len(corePolicies))]
	}
	if s.crowd {
		// Three proposers, most calls allowed: the queue for the slots
		// holds several proposers' calls at once.
		from = []string{"coder", "coder2", "coder3"}[s.rng.IntN(3)]
		if s.rng.IntN(4) > 0 {
			policy = "fulfill"
		}
	}
	t := &truth{from: from, policy: policy, invalid: s.rng.IntN(10) == 0,
		cancels: map[string]bool{}, accepts: map[string]bool{}, prompts: map[string]frame{}, promptEnded: map[string]bool{}, decisionIDs: map[string]bool{},
		size: 64 + s.rng.IntN(449), task: s.rng.IntN(2) == 0}
	if t.task && s.rng.IntN(2) == 0 {
		t.taskTimeout = 20 * time.Second
	}
	t.grantable = policy == "escalate-grant"
	s.truth[id] = t
	s.order = append(s.order, id)
	s.tracef("%s proposes %s (%s, invalid %v)", t.from, id, t.policy, t.invalid)
	s.broadcast(frame{kind: "proposal", id: id, from: t.from, pid: id, params: policyParams(t.policy), invalid: invalidWhy(t.invalid)})
	return true
}

func policyParams(policy string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"name":"write","arguments":{"policy":%q}}`, policy))
}

func invalidWhy(invalid bool) string {
	if invalid {
		return "tools/call params.name is not a non-empty string"
	}
	return ""
}

func (s *sim) withdraw() bool {
	if s.quiescing || len(s.order) == 0 {
		return false
	}
	id := s.order[s.rng.IntN(len(s.order))]
	// Often one that waits in a queue or runs as a task (their ends are
	// the rarer paths), and among those one whose effects are still being
	// carried out (a withdrawal racing them).
	waiting := append(s.inPhase(Task), s.inPhase(Queued)...)
	var busy []string
	for _, pid := range waiting {
		for _, m := range s.alive() {
			if m.sh.busy(pid) {
				busy = append(busy, pid)
			}
		}
	}
	switch r := s.rng.IntN(4); {
	case r == 0 && len(busy) > 0:
		id = busy[s.rng.IntN(len(busy))]
	case r < 2 && len(waiting) > 0:
		id = waiting[s.rng.IntN(len(waiting))]
	}
	t := s.truth[id]
	from := t.from
	if s.rng.IntN(3) == 0 {
		from = "mallory" // forged
	} else {
		t.withdrawSent = true
	}
	s.tracef("%s withdraws %s", from, id)
	s.broadcast(frame{kind: "withdraw", id: s.newID(), from: from, corr: id, pid: id})
	return true
}

func (s *sim) newID() string { s.ids++; return fmt.Sprintf("w%d", s.ids) }

// toolAnswers: the tool owner (or a forger) answers a fulfilment request
// seen on the wire: with its JSON-RPC id, SDK-style without one, with a
// wrong id, forged from another participant, or never.
func (s *sim) toolAnswers() bool {
	var reqs []frame
	for _, f := range s.wire {
		if f.kind == "request" {
			reqs = append(reqs, f)
		}
	}
	if len(reqs) == 0 {
		return false
	}
	f := reqs[s.rng.IntN(len(reqs))]
	if s.rng.IntN(2) == 0 {
		f = reqs[max(0, len(reqs)-1-s.rng.IntN(3))] // one of the latest
	}
	if s.ownerAway {
		return false // a forger could, but the owner is not here to
	}
	plan, ok := s.toolPlan[f.id]
	if !ok {
		plan = []string{"id", "sdk", "sdk", "wrong", "forged", "never"}[s.rng.IntN(6)]
		if f.task && s.rng.IntN(4) > 0 {
			plan = "task"
		}
		s.toolPlan[f.id] = plan
	}
	resp := frame{kind: "response", id: s.newID(), from: f.to, to: "", corr: f.id, pid: f.pid, rpc: f.rpc, hasRPC: true, result: `{"content":[]}`}
	if plan == "task" {
		// The same task whenever it answers the request (a re-delivery).
		tid := "t-" + f.id
		if s.tasks[tid] == nil {
			s.tasks[tid] = &wtask{pid: f.pid, request: f.id, status: "working"}
			s.covered["world/task"]++
		}
		resp.taskID, resp.status, resp.result = tid, "working", ""
	}
	switch plan {
	case "never":
		return false
	case "sdk":
		resp.hasRPC = false
	case "wrong":
		resp.rpc++
		s.toolPlan[f.id] = "id" // then the right one
	case "forged":
		resp.from = "mallory"
		s.toolPlan[f.id] = "sdk"
	}
	if resp.from == f.to && s.leaves > f.leaves {
		s.covered["world/answered_after_rejoin"]++
	}
	s.tracef("%s answers request %s (%s)", resp.from, f.id, plan)
	s.broadcast(resp)
	return true
}

// approverAnswers: an approver (or a forger) answers a prompt seen on the
// wire: accept, accept with an edit, decline, cancel, forged, unsigned,
// or never. An approver answers a re-asked prompt the same way.
func (s *sim) approverAnswers() bool {
	return s.humanAnswers()
}

func (s *sim) alive() []*member {
	var out []*member
	for _, m := range s.members {
		if m.alive {
			out = append(out, m)
		}
	}
	return out
}

func (s *sim) deliverFrame() bool {
	var ms []*member
	for _, m := range s.alive() {
		if len(m.inbox) > 0 {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return false
	}
	m := ms[s.rng.IntN(len(ms))]
	f := m.inbox[0]
	m.inbox = m.inbox[1:]
	s.tracef("%s reads %s %s from %s", m.id, f.kind, f.id, f.from)
	switch f.kind {
	case "proposal":
		s.deliver(m, Proposed{ID: f.id, From: f.from, Method: "tools/call", Tool: "write", Addressee: "fs", Params: f.params, Invalid: f.invalid, Size: s.truth[f.id].size})
	case "withdraw":
		s.deliver(m, WithdrawnBy{ID: f.corr, From: f.from})
	case "response":
		ev := Responded{RequestID: f.corr, From: f.from, HasRPCID: f.hasRPC, RPCID: f.rpc, TaskID: f.taskID, TaskStatus: f.status}
		if f.taskID == "" {
			ev.Result = json.RawMessage(f.result)
		}
		// Placed on the Loop's goroutine (Match), as fulfill places a
		// response it cannot correlate itself.
		if err := m.sh.loop.Match(m.sh.ctx, func(*Core) []Event { return []Event{ev} }); err != nil {
			panic(fmt.Sprintf("%s: match: %v", m.id, err))
		}
	case "answer":
		s.deliver(m, Answer{PromptID: f.corr, From: f.from, HasRPCID: f.hasRPC, RPCID: f.rpc, Payload: f.payload})
	case "leave", "join":
		s.hear(m, f)
	case "reject", "request":
		if f.corr != "" && (f.member != "" || f.from == "alice") {
			s.deliver(m, SupersededBy{ID: f.corr, By: f.from})
		}
	}
	return true
}

// runOp gives a turn to one of the live members' shells, as the seed
// draws: Run takes its next input (a lane's result, a decision, a task's
// news), or one of the Loop's coroutines starts or carries out the call
// it waits in (a store write, a line, a frame, a policy decision, a
// retry); what a coroutine sends Run is often taken at once.
func (s *sim) runOp() bool {
	type turn struct {
		sh *shell
		c  *coro
	}
	var ts []turn
	for _, m := range s.alive() {
		sh := m.sh
		if len(sh.inbox) > 0 {
			ts = append(ts, turn{sh, sh.run})
		}
		for _, c := range sh.coros {
			if c.runnable() {
				ts = append(ts, turn{sh, c})
			}
		}
	}
	if len(ts) == 0 {
		return false
	}
	t := ts[s.rng.IntN(len(ts))]
	if t.c == t.sh.run {
		t.sh.pump(t.sh.taken + 1)
		return true
	}
	fresh := t.c.fresh
	if fresh {
		s.tracef("  %s starts", t.c.name)
	} else {
		s.tracef("  %s: %s", t.c.name, t.c.op.what)
	}
	s.resume(t.c)
	if fresh && t.c.runnable() && s.rng.IntN(2) == 0 {
		// Started, and the call it began carried out in the same turn.
		s.resume(t.c)
	}
	if s.rng.IntN(4) > 0 {
		t.sh.pump(t.sh.sent)
	}
	return true
}

// queued reports whether proposal pid has an effect that waits in
// the Loop's lane, not begun yet.
func (sh *shell) queued(pid string, is func(Effect) bool) bool {
	ln := sh.loop.lanes[pid]
	if ln == nil {
		return false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return slices.ContainsFunc(ln.effs, is)
}

// busy reports whether proposal pid has effects queued or being carried
// out in the Loop.
func (sh *shell) busy(pid string) bool {
	ln := sh.loop.lanes[pid]
	if ln == nil {
		return false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.running || len(ln.effs) > 0
}

// decide is the seed's policy for a Decide: the proposal's, or its
// edit's when the edited call is decided again.
func (s *sim) decide(m *member, e Decide) Decided {
	t := s.truth[e.ID]
	if e.Proposal.ID != e.ID || e.Proposal.From != t.from || e.Pending < 1 || e.Inflight < 0 {
		s.fail("%s decides %s with proposal %q from %q, load %d/%d", m.id, e.ID, e.Proposal.ID, e.Proposal.From, e.Pending, e.Inflight)
	}
	policy := t.policy
	if e.Again {
		s.covered["world/edit_rechecked"]++
		if e.DecisionID == "" || e.DecisionID == e.Proposal.DecisionID || s.againIDs[e.DecisionID] {
			s.fail("%s re-checks %s under decision %q (it had %q)", m.id, e.ID, e.DecisionID, e.Proposal.DecisionID)
		}
		s.againIDs[e.DecisionID] = true
		var args struct {
			Arguments struct{ Policy string } `json:"arguments"`
		}
		_ = json.Unmarshal(e.Params, &args)
		policy = args.Arguments.Policy
	}
	d := Decision{Action: Fulfill, Target: "fs", Revision: "r1", Task: t.task, TaskTimeout: t.taskTimeout}
	incapable := ""
	switch policy {
	case "reject":
		d.Action, d.Reason, d.Message = Reject, "policy", "not allowed"
	case "escalate":
		d.Action = Escalate
	case "escalate2":
		d.Action, d.Approvers, d.Quorum = Escalate, []string{"alice", "bob"}, 2
	case "escalate3":
		d.Action, d.Approvers, d.Quorum = Escalate, []string{"alice", "bob", "carol"}, 2
		d.Reminders, d.Editable = []time.Duration{5 * time.Second}, []string{"policy"}
	case "escalate-tier":
		// The proposer listed too (never asked); a reminder, two
		// tiers, and a reminder after the deadline (dropped).
		d.Action, d.Approvers = Escalate, []string{"bob", t.from}
		d.Reminders = []time.Duration{5 * time.Second, time.Hour}
		d.EscalateTo = []decision.Tier{{After: 10 * time.Second, Approvers: []string{"carol"}}, {After: 20 * time.Second, Approvers: []string{"alice"}}}
	case "escalate-grant":
		d.Action, d.Approvers = Escalate, []string{"alice", "bob"}
		d.Grantable = &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "tool"}}}
	case "incapable":
		d.Target, incapable = "", "no participant offers write"
	}
	s.tracef("%s decides %s: %s", m.id, e.ID, d.Action)
	return Decided{ID: e.ID, Decision: d, Incapable: incapable, Again: e.Again}
}

// release has m stop acting on proposal id (its lease lapsed, or its
// record was taken): its Loop drops the effects not carried out (see
// Released).
func (s *sim) release(m *member, id string) {
	if m.sh.queued(id, func(Effect) bool { return true }) {
		s.covered["world/pruned_released"]++
	}
	s.deliver(m, Released{ID: id})
}

// requestFrame is a fulfilment request as it goes out: a task-augmented
// one is not correlated to the proposal.
func requestFrame(m *member, e SendRequest) frame {
	f := frame{kind: "request", id: e.EnvelopeID, from: m.id, to: e.To, corr: e.ID, pid: e.ID, rpc: e.RPCID, hasRPC: true, params: e.Params, member: m.id, inc: m.inc, task: e.Task}
	if e.Task {
		f.corr = ""
	}
	return f
}

// relayFrame is a relay (the tasks/result request and its response, as
// one frame) to the proposer.
func relayFrame(m *member, e SendRelay) frame {
	return frame{kind: "relay", id: e.EnvelopeID, from: m.id, to: e.To, corr: e.ID, pid: e.ID, taskID: e.TaskID, result: string(e.Result) + string(e.Error), member: m.id, inc: m.inc}
}

// taskProgress: the task a member's follower follows moves on at its
// owner (a new status, its end, or the owner forgets it), and the
// follower reads it and reports it to its Loop; one that ended is read
// as ended again. Sometimes a stale report about another task id comes
// first.
func (s *sim) taskProgress() bool {
	var fs []*follow
	var shs []*shell
	for _, m := range s.alive() {
		for _, pid := range slices.Sorted(maps.Keys(m.sh.follows)) {
			f := m.sh.follows[pid]
			if c := f.c; c.op != nil && c.op.news && c.ctx.Err() == nil {
				fs, shs = append(fs, f), append(shs, m.sh)
			}
		}
	}
	if len(fs) == 0 {
		return false
	}
	i := s.rng.IntN(len(fs))
	f, sh := fs[i], shs[i]
	t := s.tasks[f.tid]
	if t == nil {
		s.fail("%s follows task %s of %s, which its owner never made", sh.m.id, f.tid, f.pid)
		return false
	}
	if !t.ended() {
		switch r := s.rng.IntN(10); {
		case r < 4:
			t.status = map[string]string{"working": "input_required", "input_required": "working"}[t.status]
		case r < 9:
			t.status = []string{"completed", "completed", "failed"}[s.rng.IntN(3)]
			t.result = fmt.Sprintf(`{"content":[{"type":"text","text":"%s %s"}]}`, f.tid, t.status)
		default:
			t.gone = true
		}
	}
	s.tracef("%s's follower reads task %s of %s: %s gone %v", sh.m.id, f.tid, f.pid, t.status, t.gone)
	if s.rng.IntN(10) == 0 {
		f.news = append(f.news, TaskStatus{ID: f.pid, TaskID: "stale-" + f.tid, Status: "working"})
	}
	switch {
	case t.gone:
		s.covered["world/task_gone"]++
		f.ended = true
		f.news = append(f.news, TaskEnded{ID: f.pid, TaskID: f.tid, Gone: "task not found: expired"})
	case t.ended():
		f.ended = true
		f.news = append(f.news, TaskEnded{ID: f.pid, TaskID: f.tid, Status: t.status, Result: json.RawMessage(t.result)})
	default:
		s.covered["world/task_status"]++
		f.news = append(f.news, TaskStatus{ID: f.pid, TaskID: f.tid, Status: t.status})
	}
	s.resume(f.c)
	sh.pump(sh.sent)
	return true
}

// writeLine writes a decision-log line.
func (s *sim) writeLine(m *member, l Line) {
	s.lines = append(s.lines, l)
	s.checkLine(l)
	if l.Stage == "rejected" && l.Reason == "timeout" && strings.HasPrefix(l.Message, "task ") {
		s.covered["rejected/timeout/task"]++
	}
	if l.Stage == "rejected" && l.Reason == "other" {
		switch l.Message {
		case unloggedMessage:
			s.covered["rejected/other/unlogged"]++
		case "the gateway refused the fulfilment request":
			s.covered["rejected/other/refused"]++
		}
	}
	if l.Stage == "decided" && l.DecisionID != s.truth[l.ProposalID].claimID && !s.againIDs[l.DecisionID] {
		s.fail("decided line of %s under %q: neither its claim's %q nor a re-check's", l.ProposalID, l.DecisionID, s.truth[l.ProposalID].claimID)
	}
	if l.Stage == "rejected" && l.Reason == "busy" {
		for _, k := range []string{"the limit per proposer", "the group's pending work", "bytes (the limit)", "proposals are pending (the limit)"} {
			if strings.Contains(l.Message, k) {
				s.covered["busy/"+k]++
			}
		}
	}
	if l.Reason != "" && (l.Stage == "rejected" || l.Stage == "ignored") {
		s.covered[l.Stage+"/"+l.Reason]++
	} else {
		s.covered[l.Stage]++
	}
	if l.Stage == "decided" {
		if t := s.truth[l.ProposalID]; t != nil {
			if prev, ok := s.decided[l.DecisionID]; ok && prev != l.Action {
				s.fail("decision %s logged as %s and as %s", l.DecisionID, prev, l.Action)
			}
			s.decided[l.DecisionID] = l.Action
			t.decisionIDs[l.DecisionID] = true
		}
	}
	s.tracef("  %s log %s %s %s %s", m.id, l.Stage, l.ProposalID, l.DecisionID, l.Reason)
}

// checkLine checks that a line says what fulfill's events say of its
// proposal: its proposer, method, tool and target on every line (a
// cancel refused for a proposal not held knows none), and what its
// stage is about.
func (s *sim) checkLine(l Line) {
	t := s.truth[l.ProposalID]
	if t == nil {
		s.fail("line %s about unknown proposal %q", l.Stage, l.ProposalID)
		return
	}
	if l.Stage == "ignored" && l.Reason == "cancel_refused" && l.Proposer == "" {
		return
	}
	if l.Proposer != t.from || l.Method != "tools/call" || l.Tool != "write" || l.Target != "fs" {
		s.fail("%s line of %s says proposer %q method %q tool %q target %q", l.Stage, l.ProposalID, l.Proposer, l.Method, l.Tool, l.Target)
	}
	quorum := policyQuorum[t.policy]
	switch {
	case l.Stage == "fulfilled":
		// The owner's answer, or the task's outcome (the simulated
		// follower reads none of a task cancelled at its owner).
		want := `{"content":[]}`
		if wt := s.tasks[l.TaskID]; wt != nil {
			want = wt.result
		}
		if string(l.Result)+string(l.RPCError) != want || l.Latency < 0 {
			s.fail("fulfilled line of %s says %s%s (the owner said %s), latency %s", l.ProposalID, l.Result, l.RPCError, want, l.Latency)
		}
		if len(l.By) < quorum || (quorum == 0 && len(l.By) > 0) {
			s.fail("fulfilled line of %s (%s) approved by %v", l.ProposalID, t.policy, l.By)
		}
	case l.Stage == "approved" && len(l.By) < max(quorum, 1):
		s.fail("approved line of %s (%s) by %v", l.ProposalID, t.policy, l.By)
	case l.Stage == "approved" && slices.ContainsFunc(l.By, func(a string) bool { return !t.accepts[a] }):
		// The quorum's model: only approvers who sent an accept count.
		s.fail("approved line of %s by %v; only %v accepted", l.ProposalID, l.By, slices.Sorted(maps.Keys(t.accepts)))
	case l.Stage == "escalated" && (len(l.By) == 0 || l.Deadline.IsZero()):
		s.fail("escalated line of %s asks %v until %s", l.ProposalID, l.By, l.Deadline)
	case l.Stage == "superseded" && len(l.By) != 1:
		s.fail("superseded line of %s by %v", l.ProposalID, l.By)
	case l.Stage == "ignored" && (l.Reason == "response_from_other" || l.Reason == "wrong_rpc_id" || l.Reason == "forged_answer" || l.Reason == "spoofed_withdraw") && len(l.By) != 1:
		s.fail("ignored line (%s) of %s by %v", l.Reason, l.ProposalID, l.By)
	case l.Stage == "task" && (l.TaskID == "" || l.TaskStatus == ""):
		s.fail("task line of %s without its task (%q %q)", l.ProposalID, l.TaskID, l.TaskStatus)
	}
}

// operatorCancels: an operator cancels a proposal through one member's
// API: held there, it is cancelled there; held by another member, its
// record is taken (refused once its request or reject is committed):
// the holder is released, the taker resumes and cancels it.
func (s *sim) operatorCancels() bool {
	if s.quiescing || len(s.order) == 0 {
		return false
	}
	m, ok := s.anyAlive()
	if !ok {
		return false
	}
	id := s.order[s.rng.IntN(len(s.order))]
	s.tracef("operator cancels %s at %s", id, m.id)
	s.covered["world/cancel"]++
	if st := s.store.recs[id]; st != nil {
		var r Proposal
		_ = json.Unmarshal(st.data, &r)
		if r.Owner != m.id && r.Request == nil && r.Phase != Answered {
			for _, h := range s.members {
				if h.id == r.Owner && h.alive {
					s.release(h, id)
				}
			}
			r.Owner = m.id
			data, _ := json.Marshal(r)
			s.store.rev++
			s.store.put(&r, data, s.store.rev)
			r.Rev = s.store.rev
			s.covered["world/take"]++
			// Resumed and at once Cancelled, back to back (PostAll):
			// the resumed prompts are never asked before the cancel.
			if err := m.sh.loop.PostAll(m.sh.ctx, Resumed{Records: []Proposal{r}, How: "taken by the operator"}, Cancelled{ID: id, By: "ops"}); err != nil {
				panic(fmt.Sprintf("%s: post: %v", m.id, err))
			}
			return true
		}
	}
	s.deliver(m, Cancelled{ID: id, By: "ops"})
	return true
}

// otherAnswers: an approver answers a proposal directly, with its own
// mcp/reject: every member holding it stops (superseded), except where
// it runs as a task (its proposer waits for the relayed result) or its
// request went out. onlyTasks: one running as a task, or none.
func (s *sim) otherAnswers(onlyTasks bool) bool {
	if s.quiescing || len(s.order) == 0 {
		return false
	}
	id := s.order[s.rng.IntN(len(s.order))]
	// Half the time one that runs as a task somewhere, if any does.
	tasks := s.inPhase(Task)
	switch {
	case len(tasks) > 0 && (onlyTasks || s.rng.IntN(2) == 0):
		id = tasks[s.rng.IntN(len(tasks))]
	case onlyTasks:
		return false
	}
	s.truth[id].otherAnswered = true
	s.covered["world/other_answered"]++
	s.tracef("alice rejects %s directly", id)
	s.broadcast(frame{kind: "reject", id: s.newID(), from: "alice", to: s.truth[id].from, corr: id, pid: id, reason: "disagree"})
	return true
}

// inPhase returns the proposals open in phase ph at a live member, as
// its Loop reads them (Do).
func (s *sim) inPhase(ph Phase) []string {
	var out []string
	for _, m := range s.alive() {
		err := m.sh.loop.Do(m.sh.ctx, func(c *Core) {
			for _, pid := range c.sorted() {
				if e := c.props[pid]; e.outcome == Open && e.p.Phase == ph {
					out = append(out, pid)
				}
			}
		})
		if err != nil {
			panic(fmt.Sprintf("%s: do: %v", m.id, err))
		}
	}
	return out
}

// ownerMoves: the tool owner leaves the space (its link drops) or comes
// back; everyone hears the presence frame in its turn.
func (s *sim) ownerMoves() bool {
	if s.quiescing && !s.ownerAway {
		return false
	}
	s.ownerAway = !s.ownerAway
	kind := "join"
	if s.ownerAway {
		kind = "leave"
		s.leaves++
		s.covered["world/owner_left"]++
	} else {
		s.covered["world/owner_back"]++
	}
	s.tracef("the tool owner fs %ss", kind)
	s.broadcast(frame{kind: kind, id: s.newID(), from: "fs"})
	return true
}

// hear delivers a participant's presence to m (stepped keeps m's view
// of the tool owner's as its core takes it).
func (s *sim) hear(m *member, f frame) {
	if f.kind == "leave" {
		s.deliver(m, ParticipantLeft{ID: f.from})
	} else {
		s.deliver(m, ParticipantJoined{ID: f.from})
	}
}

// heard keeps m's view of the tool owner's presence as its core takes
// ev: its leave, its join, or a request the wire found it away for.
func (s *sim) heard(m *member, ev Event) {
	switch ev := ev.(type) {
	case ParticipantLeft:
		if ev.ID != "fs" {
			return
		}
	case ParticipantJoined:
		if ev.ID == "fs" {
			m.owner = presence{first: m.owner.first}
		}
		return
	case Sent:
		if !errors.Is(ev.Err, ErrAway) {
			return
		}
	default:
		return
	}
	if !m.owner.away {
		first := m.owner.first
		if first.IsZero() {
			first = s.now
		}
		m.owner = presence{away: true, since: s.now, first: first}
	}
}

// notSuperseded counts another's answer read while the proposal runs a
// task (checkTaskEnd checks that it did not end it).
func (s *sim) notSuperseded(m *member, ev Event) {
	if sb, ok := ev.(SupersededBy); ok {
		if e := m.core.props[sb.ID]; e != nil && e.outcome == Open && e.p.Phase == Task {
			s.covered["world/task_not_superseded"]++
		}
	}
}

// checkTaskEnd checks how m ended e, which ran a task: by its result
// only once the task ended (a relay), else with the task cancelled at
// its owner (or, dropped for another member, only no longer followed);
// others' answers never supersede it.
func (s *sim) checkTaskEnd(m *member, e *entry, effs []Effect) {
	cancel := ""
	for _, x := range effs {
		if c, ok := x.(CancelTask); ok && c.ID == e.p.ID {
			cancel = c.Reason
		}
	}
	switch e.outcome {
	case Superseded:
		s.fail("%s let another's answer supersede %s, which runs task %s", m.id, e.p.ID, e.p.Task.ID)

	case Fulfilled:
		if !e.req.taskDone {
			s.fail("%s relayed %s before its task ended", m.id, e.p.ID)
		}
	case Rejected:
		if !e.req.taskDone && (e.p.Reject == nil || !e.p.Reject.CancelTask) {
			s.fail("%s rejected %s (%s) without cancelling its task", m.id, e.p.ID, e.p.Reject.Reason)
		}
	case Withdrawn:
		s.covered["world/task_withdrawn"]++
		if cancel == "" || cancel == DropReason {
			s.fail("%s took the withdrawal of %s without cancelling its task", m.id, e.p.ID)
		}
	case Dropped:
		if cancel != DropReason {
			s.fail("%s dropped %s for another member with its task cancel %q (want %q: the adopter follows it)", m.id, e.p.ID, cancel, DropReason)
		}
	}
}

// checkSlots checks m's fulfilment slots after a step, counted from its
// proposals (those open in phase Fulfilling hold one), not with the
// core's counts: a request committed here (not resumed) found its
// proposer below its share and a slot free; the fresh ones never hold
// more than the limits (resumed ones may: they are out already); and no
// proposal waits in the queue while a slot it may take is free.
func (s *sim) checkSlots(m *member, prev map[string]*entry, fulfilling map[*entry]bool) {
	per := s.cfg.MaxInflightPerProposer
	if per == 0 {
		per = s.cfg.MaxInflight
	}
	held, used := map[string]int{}, 0
	freshHeld, freshUsed := map[string]int{}, 0
	committed := map[string]bool{}
	for id, e := range m.core.props {
		if e.outcome != Open || e.p.Phase != Fulfilling {
			continue
		}
		used++
		held[e.p.From]++
		if !fulfilling[e] && prev[id] == e {
			m.fresh[e] = true // committed in this step, not resumed
			committed[e.p.From] = true
		}
		if m.fresh[e] {
			freshUsed++
			freshHeld[e.p.From]++
		}
	}
	for e := range m.fresh {
		if e.outcome != Open || e.p.Phase != Fulfilling {
			delete(m.fresh, e)
		}
	}
	for from := range committed {
		if held[from] > per || used > s.cfg.MaxInflight {
			s.fail("%s committed a request of %s with %d of its fulfilments out (share %d), %d in all (limit %d)", m.id, from, held[from], per, used, s.cfg.MaxInflight)
		}
	}
	for from, n := range freshHeld {
		if n > per {
			s.fail("%s holds %d fulfilments of %s it committed (share %d)", m.id, n, from, per)
		}
	}
	if freshUsed > s.cfg.MaxInflight {
		s.fail("%s holds %d fulfilments it committed (limit %d)", m.id, freshUsed, s.cfg.MaxInflight)
	}
	if m.core.closing || used >= s.cfg.MaxInflight {
		return
	}
	if s.cfg.ReserveIDs > 0 && len(m.core.rpcIDs) == 0 {
		// No JSON-RPC id at hand: a request waits for the ids reserved
		// (ReserveIDs, out on a worker), slot free or not.
		s.covered["world/waits_for_ids"]++
		return
	}
	for _, id := range m.core.sorted() {
		e := m.core.props[id]
		if e.outcome != Open || e.p.Phase != Queued {
			continue
		}
		if held[e.p.From] < per {
			s.fail("%s keeps %s of %s queued with a slot free for it (%d of %d used, %d of its share %d)", m.id, id, e.p.From, used, s.cfg.MaxInflight, held[e.p.From], per)
		} else {
			s.covered["world/slot_share"]++
		}
	}
}

// checkTurns checks that the queued proposers get the freed slots in
// turn: a proposer's queued proposal starts a second time only if every
// other proposer that waited since before its first has started since,
// or is at its share. waitFrom and lastStart count the queue's
// starts; one step starting more than one (a shutdown, a resume) is not
// judged.
func (s *sim) checkTurns(m *member, queued map[*entry]bool) {
	per := s.cfg.MaxInflightPerProposer
	if per == 0 {
		per = s.cfg.MaxInflight
	}
	var started []*entry
	held := map[string]int{}
	waiting := map[string]bool{}
	for _, id := range m.core.sorted() {
		e := m.core.props[id]
		if e.outcome != Open {
			continue
		}
		switch e.p.Phase {
		case Fulfilling:
			held[e.p.From]++
			if queued[e] {
				started = append(started, e)
			}
		case Queued:
			waiting[e.p.From] = true
		}
	}
	if len(started) == 1 && !m.core.closing {
		q := started[0].p.From
		if last, ok := m.lastStart[q]; ok {
			for p, since := range m.waitFrom {
				if pl, ok := m.lastStart[p]; ok && pl > last {
					continue // p's turn came since
				}
				if p != q && waiting[p] && since <= last && held[p] < per {
					s.fail("%s started a queued proposal of %s twice (%s now) while %s waited with its share free since before the first", m.id, q, started[0].p.ID, p)
				}
			}
		}
		m.lastStart[q] = m.starts
		if len(m.waitFrom) > 1 {
			s.covered["world/turns"]++
		}
	}
	m.starts += len(started)
	for p := range m.waitFrom {
		if !waiting[p] {
			delete(m.waitFrom, p)
		}
	}
	for p := range waiting {
		if _, ok := m.waitFrom[p]; !ok {
			m.waitFrom[p] = m.starts
		}
	}
}

// checkAsks checks that a record read (resumed, adopted, read again)
// in phase AwaitingApproval asks again only its recorded open prompts,
// each as recorded: the same approver, JSON-RPC id and payload (an
// approver's client knows it is the same question and answers once).
func (s *sim) checkAsks(m *member, ev Event, effs []Effect) {
	var recs []Proposal
	switch ev := ev.(type) {
	case Resumed:
		recs = ev.Records
	case Reloaded:
		if ev.Record != nil {
			recs = []Proposal{*ev.Record}
		}
	}
	for _, x := range effs {
		a, ok := x.(SendPrompt)
		if !ok || !a.Again {
			continue
		}
		i := slices.IndexFunc(recs, func(r Proposal) bool { return r.ID == a.ID })
		if i < 0 {
			continue
		}
		open := openPrompts(&recs[i])
		j := slices.IndexFunc(open, func(p Prompt) bool { return p.EnvelopeID == a.EnvelopeID })
		if j < 0 || open[j].Approver != a.To || open[j].RPCID != a.RPCID || !bytes.Equal(open[j].Payload, a.Payload) {
			s.fail("%s asks %s again with prompt %s to %s (rpc %d); its record's open prompts are %+v", m.id, a.ID, a.EnvelopeID, a.To, a.RPCID, open)
		}
		s.covered["world/resumed_ask"]++
	}
}

// checkOwnerCommit checks, as m commits a fulfilment request (to be
// recorded and sent), that its owner is here as far as m heard: one
// that is away is held instead.
func (s *sim) checkOwnerCommit(m *member, r *Proposal) {
	if m.owner.away {
		s.fail("%s commits request %s for %s while %s is away (since %s)", m.id, r.Request.EnvelopeID, r.ID, r.Request.Target, m.owner.since.Format("15:04:05"))
	}
}

// checkOwnerReject checks, as m rejects a proposal, that "incapable"
// for its owner's absence comes only once the owner has been away for
// the whole rejoin grace, and is away still (an owner back within the
// grace keeps its request, and its response counts), as m heard it.
func (s *sim) checkOwnerReject(m *member, r *Proposal, reqOut bool) {
	if r.Reject != nil && r.Reject.Reason == "incapable" && r.Request != nil {
		switch {
		case strings.Contains(r.Reject.Message, "did not come back within"):
			s.covered["world/held_incapable"]++
		case strings.Contains(r.Reject.Message, "left the space before answering"):
			s.covered["world/left_incapable"]++
		default:
			s.fail("%s rejected %s incapable after its request: %q", m.id, r.ID, r.Reject.Message)
		}
		if !m.owner.away || s.now.Before(m.owner.first.Add(s.cfg.OwnerRejoinGrace)) {
			s.fail("%s rejected %s incapable with its owner away %v since %s (grace %s)", m.id, r.ID, m.owner.away, m.owner.since.Format("15:04:05"), s.cfg.OwnerRejoinGrace)
		}
		if !r.Reject.CancelRequest && reqOut {
			s.fail("%s rejects %s incapable after its request without cancelling it (its owner may be back, unheard)", m.id, r.ID)
		}
	}
}

// groupLoad: a member reads the group's load from the leases (its
// peers' pending work, the group's capacity; sometimes not read yet).
func (s *sim) groupLoad() bool {
	m, ok := s.anyAlive()
	if !ok {
		return false
	}
	g := GroupLoad{Peers: s.rng.IntN(6)}
	if s.rng.IntN(4) > 0 {
		g.Capacity = len(s.members) * s.cfg.MaxPending
	}
	if s.quiescing {
		g = GroupLoad{} // the group empties out
	}
	live := 0
	for _, e := range m.core.props {
		if e.claim.landed() && e.outcome == Open {
			live++
		}
	}
	m.group = groupView{pending: live + g.Peers, capacity: g.Capacity}
	s.tracef("%s reads the group's load: peers %d capacity %d", m.id, g.Peers, g.Capacity)
	s.deliver(m, g)
	return true
}

// admitted checks, as the core admits proposal id (as it arrives: its
// claim with a record is written), that none of the admission limits was
// reached: counted here from the core's open proposals admitted before
// it, not with the core's own counts. Admitted, it keeps its place.
func (s *sim) admitted(m *member, id string) {
	e := m.core.props[id]
	live, mine, bytes := 0, 0, 0
	for oid, o := range m.core.props {
		if oid == id || o.noRecord() || o.outcome != Open {
			continue
		}
		live++
		bytes += o.p.Size
		if o.p.From == e.p.From {
			mine++
		}
	}
	switch {
	case e.noRecord():
		s.fail("%s admitted %s, which it refused at once", m.id, id)
	case live >= s.cfg.MaxPending:
		s.fail("%s admitted %s with %d proposals pending (limit %d)", m.id, id, live, s.cfg.MaxPending)
	case s.cfg.MaxPendingPerProposer > 0 && mine >= s.cfg.MaxPendingPerProposer:
		s.fail("%s admitted %s with %d of %s's proposals pending (limit %d)", m.id, id, mine, e.p.From, s.cfg.MaxPendingPerProposer)
	case s.cfg.MaxPendingBytes > 0 && int64(bytes+e.p.Size) > s.cfg.MaxPendingBytes:
		s.fail("%s admitted %s (%d bytes) with %d bytes pending (limit %d)", m.id, id, e.p.Size, bytes, s.cfg.MaxPendingBytes)
	case m.group.capacity > 0 && m.group.pending >= m.group.capacity:
		s.fail("%s admitted %s while the group was full (%d of %d)", m.id, id, m.group.pending, m.group.capacity)
	}
}

// record is the store's record of pid (nil: none).
func (s *sim) record(pid string) *Proposal {
	st := s.store.recs[pid]
	if st == nil {
		return nil
	}
	var r Proposal
	if err := json.Unmarshal(st.data, &r); err != nil {
		panic(err)
	}
	r.Rev = st.rev
	return &r
}

// write applies a Write to the shared store: compare-and-set, a claim
// once per id for the whole group, and, while the store is failing,
// errors for a share of the writes (which then did not happen).
func (s *sim) write(m *member, w Write) (uint64, error) {
	if s.rng.Float64() < s.failRate {
		return 0, errUnavailable
	}
	// A timeout after the write was applied: the member cannot tell.
	if s.rng.Float64() < s.failRate/3 {
		if _, err := s.write(m, w); err == nil {
			s.tracef("  %s's write %s applied, reported failed", m.id, w.ID)
			s.covered["world/ambiguous_write"]++
		}
		return 0, errUnavailable
	}
	st := &s.store
	cur := st.recs[w.ID]
	if w.Create {
		if d, ok := st.claimed[w.ID]; ok {
			if w.ClaimOnly && d == w.Record.DecisionID {
				// Its own earlier try, applied: the claim is won (as
				// state.ClaimDecision's winner says).
				st.rev++
				return st.rev, nil
			}
			if s.rng.IntN(2) == 0 {
				// The store names the winning claim's decision (wrapped,
				// as a store's error may be).
				return 0, fmt.Errorf("claim %s: %w", w.ID, &ClaimedError{Winner: d})
			}
			return 0, ErrExists
		}
		st.claimed[w.ID] = w.Record.DecisionID
		if t := s.truth[w.ID]; t != nil {
			t.claimed, t.claimID = true, w.Record.DecisionID
			t.decisionIDs[w.Record.DecisionID] = true
			t.claimOnly = w.ClaimOnly
		}
		if w.ClaimOnly {
			s.covered["world/claim_only"]++
			st.rev++
			return st.rev, nil // no record
		}
	} else {
		if cur == nil || cur.rev != w.Rev {
			return 0, ErrConflict
		}
		if cur.owner != m.id {
			return 0, ErrConflict
		}
	}
	if w.Record == nil {
		delete(st.recs, w.ID)
		if e := m.core.props[w.ID]; e != nil && e.outcome == Withdrawn {
			s.truth[w.ID].durableWd = true
		}
		st.rev++
		return st.rev, nil
	}
	if w.Record.Phase == Task && w.Record.Task != nil {
		s.durableTasks[w.Record.Task.ID] = w.ID
	}
	s.checkWrite(w, cur)
	data, err := json.Marshal(w.Record)
	if err != nil {
		panic(err)
	}
	st.rev++
	st.put(w.Record, data, st.rev)
	return st.rev, nil
}

// checkWrite checks a record as it is written over cur: an approver's
// approval is counted once (across restarts and adoption too), and
// Soon is set on the writes nothing sent waits for, and only on those.
func (s *sim) checkWrite(w Write, cur *stored) {
	r := w.Record
	seen := map[string]bool{}
	for _, a := range r.Approvals {
		if seen[a.Approver] {
			s.fail("record of %s holds %s's approval twice", w.ID, a.Approver)
		}
		seen[a.Approver] = true
	}
	old := cur
	if w.Create {
		old = nil
	}
	var want bool
	switch {
	case w.Create || old == nil:
	case r.Phase == Queued, r.Phase == Task && old.phase == Task:
		want = true // queued, a task's status
	case r.Phase == AwaitingApproval && old.phase == Deciding:
		want = false
	case r.Phase == AwaitingApproval && len(r.Prompts) > old.prompts:
		want = false // a prompt, sent once this is durable
	case r.Phase == AwaitingApproval && len(r.Approvals) > old.approvals:
		want = true // an approval counted
	case r.Phase == AwaitingApproval && r.Phase == old.phase:
		return // written again (after a reload): either
	}
	if w.Soon != want {
		s.fail("write of %s (%s over %v) Soon %v, want %v", w.ID, r.Phase, old != nil, w.Soon, want)
	}
}

// fireTimer fires the live members' earliest timer (their Loops'
// Clock.AfterFunc), the time moving on to it: the Loop posts its Fired.
func (s *sim) fireTimer() bool {
	var best *shell
	bi := -1
	for _, m := range s.alive() {
		for i, t := range m.sh.timers {
			if bi < 0 || t.at.Before(best.timers[bi].at) {
				best, bi = m.sh, i
			}
		}
	}
	if best == nil {
		return false
	}
	t := best.timers[bi]
	best.timers = slices.Delete(best.timers, bi, bi+1)
	if t.at.After(s.now) {
		s.now = t.at
	}
	s.tracef("%s timer at %s", best.m.id, t.at.Format("15:04:05"))
	t.f()
	return true
}

// crash drops a member's memory: of what it was doing, the first effect
// of each proposal may have happened (a write applied, a frame sent).
func (s *sim) crash() bool {
	if s.quiescing {
		return false
	}
	m, ok := s.anyAlive()
	if !ok {
		return false
	}
	s.down(m)
	return true
}

// anyAlive picks a member that is up, at random (false: none is).
func (s *sim) anyAlive() (*member, bool) {
	ms := s.alive()
	if len(ms) == 0 {
		return nil, false
	}
	return ms[s.rng.IntN(len(ms))], true
}

func (s *sim) down(m *member) {
	s.tracef("%s crashes", m.id)
	s.covered["world/crash"]++
	// Each call its Loop was making may have happened.
	m.sh.kill(true)
	// A ClaimOnly claim won, its reject not out: no record, so nobody
	// answers it (the exempted case).
	for id, e := range m.core.props {
		if t := s.truth[id]; t != nil && e.noRecord() && s.store.claimed[id] == e.p.DecisionID && (s.views[id] == nil || len(s.views[id].rejects) == 0) {
			t.busyLost = true
			s.covered["world/busy_lost"]++
		}
	}
	m.alive = false
	m.core = nil
	m.inbox = nil
}

// restart starts a member that is down, or one shutting down again
// (its process ends, whatever it was still doing).
func (s *sim) restart() bool {
	for _, m := range s.members {
		if m.alive && m.closing {
			s.down(m)
		}
		if !m.alive {
			s.start(m)
			return true
		}
	}
	return false
}

// shutdown: SIGTERM; the member answers everything it holds and keeps
// running until it is restarted.
func (s *sim) shutdown() bool {
	if s.quiescing {
		return false
	}
	m, ok := s.anyAlive()
	if !ok {
		return false
	}
	if m.closing {
		return false
	}
	m.closing = true
	s.tracef("%s shuts down", m.id)
	s.covered["world/shutdown"]++
	s.deliver(m, Closing{})
	return true
}

// loseMember: a member's lease lapses (it crashed, or it is cut off but
// still running) and a live member adopts its records.
func (s *sim) loseMember() bool {
	if s.quiescing || len(s.members) < 2 {
		return false
	}
	from, to := s.members[0], s.members[1]
	if s.rng.IntN(2) == 0 {
		from, to = to, from
	}
	if !to.alive {
		return false
	}
	switch {
	case !from.alive:
		s.tracef("%s's lease lapses", from.id)
	case s.rng.IntN(2) == 0:
		s.down(from)
	default:
		s.tracef("%s's lease lapses while it runs", from.id)
		// It stops acting on its records first (see Released).
		for _, r := range s.owned(from.id) {
			s.covered["world/release"]++
			s.release(from, r.ID)
		}
	}
	s.adopt(from.id, to)
	return true
}

func (s *sim) adopt(from string, to *member) {
	recs := s.owned(from)
	for i := range recs {
		recs[i].Owner = to.id
		data, _ := json.Marshal(recs[i])
		s.store.rev++
		s.store.put(&recs[i], data, s.store.rev)
		recs[i].Rev = s.store.rev
	}
	s.tracef("%s adopts %d records of %s", to.id, len(recs), from)
	if len(recs) > 0 {
		s.covered["world/adopt"]++
	}
	if len(recs) > 0 {
		s.deliver(to, Resumed{Records: recs, How: "adopted from " + from})
	}
}

// check reports the first invariant broken so far.
func (s *sim) check() error {
	err := s.violation
	s.violation = nil
	if err == nil {
		for _, m := range s.alive() {
			if e := checkLoad(m.core); e != nil {
				return fmt.Errorf("%s: %w", m.id, e)
			}
			// What the Loop publishes and counts, from any goroutine.
			if l := m.sh.loop; l.Live() != m.core.Live() {
				return fmt.Errorf("%s: the Loop says %d live, its core %d", m.id, l.Live(), m.core.Live())
			}
			if _, n := m.sh.loop.Handoffs(); n != m.sh.proposed {
				return fmt.Errorf("%s: the Loop counted %d proposals, %d were posted", m.id, n, m.sh.proposed)
			}
		}
	}
	return err
}

// checkLoad compares the load the core keeps as entries come and go
// (track) with a count over its entries.
func checkLoad(c *Core) error {
	live, bytes, by := 0, int64(0), map[string]int{}
	for _, e := range c.props {
		if !e.noRecord() && e.outcome == Open {
			live, bytes = live+1, bytes+int64(e.p.Size)
			by[e.p.From]++
		}
	}
	if live != c.nLive || bytes != c.nBytes || !maps.Equal(by, c.nBy) {
		return fmt.Errorf("load kept as %d, %d bytes, %v; counted %d, %d bytes, %v", c.nLive, c.nBytes, c.nBy, live, bytes, by)
	}
	return nil
}

// view is what the wire shows of one proposal's answers.
type view struct {
	requests, rejects, relays []frame
	cancelled                 map[string]bool // request envelope ids cancelled
	tasksCancelled            map[string]bool // task ids cancelled (tasks/cancel)
}

// answered reports whether the proposer had its answer: a reject, a
// relay, or a fulfilment request that is not task-augmented (whose
// response is the answer; a task-augmented one's is not).
func (v *view) answered() bool {
	return v != nil && (len(v.rejects) > 0 || len(v.relays) > 0 || (len(v.requests) > 0 && !v.requests[0].task))
}

// onWire checks a frame a member sends, as it goes out.
func (s *sim) onWire(f frame, m *member) {
	if f.member == "" {
		return
	}
	t := s.truth[f.pid]
	if t == nil {
		s.fail("%s sent %s about unknown proposal %q", f.member, f.kind, f.pid)
		return
	}
	v := s.views[f.pid]
	if v == nil {
		v = &view{cancelled: map[string]bool{}, tasksCancelled: map[string]bool{}}
		s.views[f.pid] = v
	}
	switch f.kind {
	case "request", "reject", "prompt", "relay":
		if f.began.durableWd {
			s.fail("%s %s sent for %s after its withdrawal was written", f.kind, f.id, f.pid)
		}
		if f.began.withdrawnHere {
			s.fail("%s sent %s %s for %s after it took its withdrawal", m.id, f.kind, f.id, f.pid)
		}
	}
	switch f.kind {
	case "request", "prompt":
		// A JSON-RPC id goes out in one envelope only (a prompt asked
		// again keeps its envelope); a request's was reserved ahead
		// when the core reserves them (Config.ReserveIDs).
		if e, ok := s.rpcOwner[f.rpc]; ok && e != f.id {
			s.fail("%s %s for %s goes out with JSON-RPC id %d, which %s had", f.kind, f.id, f.pid, f.rpc, e)
		}
		s.rpcOwner[f.rpc] = f.id
		if f.kind == "request" && s.cfg.ReserveIDs > 0 && !s.reserved[f.rpc] {
			s.fail("request %s for %s goes out with JSON-RPC id %d, never reserved", f.id, f.pid, f.rpc)
		}
	}
	switch f.kind {
	case "request":
		if len(v.requests) > 0 {
			s.fail("a second fulfilment request for %s: %s after %s", f.pid, f.id, v.requests[0].id)
		}
		if len(v.rejects) > 0 {
			s.fail("fulfilment request %s for %s after its reject %s", f.id, f.pid, v.rejects[0].id)
		}
		if t.invalid || t.policy == "reject" || t.policy == "incapable" {
			s.fail("fulfilment request for %s, which is %s (invalid %v)", f.pid, t.policy, t.invalid)
		}
		if quorum := policyQuorum[t.policy]; len(t.accepts) < quorum {
			s.fail("fulfilment request for %s with %d approvals from its approvers, %d needed", f.pid, len(t.accepts), quorum)
		}
		if f.began.rejected {
			// A call written after its proposal's reject was committed
			// runs for nobody. Judged as of when the send began: a
			// member released while its write is under way still
			// finishes it (the Loop stops no send it began), after the
			// adopter's reject and cancel if the wire is that slow.
			s.fail("fulfilment request %s for %s after its reject was committed", f.id, f.pid)
		}
		if !s.logged(f.pid, "fulfilling", "") {
			s.fail("fulfilment request for %s without a fulfilling line before it", f.pid)
		}
		v.requests = append(v.requests, f)
	case "reject":
		if len(v.rejects) > 0 && v.rejects[0].id == f.id {
			s.covered["world/resent_reject"]++
		}
		if len(v.rejects) > 0 && v.rejects[0].id != f.id {
			s.fail("two rejects for %s: %s (%s) and %s (%s)", f.pid, v.rejects[0].id, v.rejects[0].reason, f.id, f.reason)
		}
		if len(v.relays) > 0 {
			s.fail("reject %s for %s after its relay %s", f.reason, f.pid, v.relays[0].id)
		}
		if len(v.requests) > 0 {
			// Its owner left after it was written, or was away when it
			// was (this member had not heard yet): "incapable", not
			// cancelled, once the grace ran out.
			gone := f.reason == "incapable" && (s.leaves > v.requests[0].leaves || v.requests[0].lost)
			if f.reason != "timeout" && f.reason != "other" && f.reason != "incapable" {
				s.fail("reject %s for %s after its fulfilment request", f.reason, f.pid)
			}
			// A request that became a task is cancelled as the task (one
			// its owner forgot needs none).
			req := v.requests[0]
			task := s.tasks["t-"+req.id]
			taskCancelled := task != nil && (v.tasksCancelled["t-"+req.id] || (task.gone && f.reason == "other"))
			if !gone && !v.cancelled[req.id] && !taskCancelled {
				s.fail("reject %s for %s after its fulfilment request, which was not cancelled first", f.reason, f.pid)
			}
		}
		if t.invalid && f.reason != "invalid" {
			s.fail("invalid proposal %s rejected %s", f.pid, f.reason)
		}
		if !s.logged(f.pid, "rejected", f.reason) {
			s.fail("reject %s for %s without a rejected line before it", f.reason, f.pid)
		}
		v.rejects = append(v.rejects, f)
	case "cancel":
		v.cancelled[f.corr] = true
	case "status":
		// Never an answer, and only while the proposal waits: not after
		// its answer or its withdrawal, only for what it waits for.
		s.covered["status/"+f.reason]++
		if !s.cfg.StatusChats {
			s.fail("status chat %s for %s with status chats off", f.reason, f.pid)
		}
		if f.to != t.from {
			s.fail("status chat for %s to %s, not its proposer %s", f.pid, f.to, t.from)
		}
		if f.began.answered {
			s.fail("status chat %s for %s after its answer", f.reason, f.pid)
		}
		if f.began.durableWd || f.began.withdrawnHere {
			s.fail("status chat %s for %s after its withdrawal", f.reason, f.pid)
		}
		switch f.reason {
		case StatusEscalated:
			if policyQuorum[t.policy] == 0 {
				s.fail("status escalated for %s, which is %s", f.pid, t.policy)
			}
		case StatusTask:
			if wt := s.tasks[f.taskID]; wt == nil || wt.pid != f.pid {
				s.fail("status task %s for %s, which runs no such task", f.taskID, f.pid)
			}
		case StatusQueued:
		default:
			s.fail("status chat %q for %s", f.reason, f.pid)
		}
	case "task_cancel":
		v.tasksCancelled[f.taskID] = true
		s.covered["world/task_cancelled"]++
	case "relay":
		if len(v.relays) > 0 && v.relays[0].id == f.id {
			s.covered["world/resent_relay"]++
		}
		if len(v.relays) > 0 && v.relays[0].id != f.id {
			s.fail("two relays for %s: %s and %s", f.pid, v.relays[0].id, f.id)
		}
		if len(v.rejects) > 0 {
			s.fail("relay %s for %s after its reject %s (%s)", f.id, f.pid, v.rejects[0].id, v.rejects[0].reason)
		}
		if len(v.requests) == 0 || !v.requests[0].task {
			s.fail("relay %s for %s, whose request was not task-augmented", f.id, f.pid)
		}
		// What is relayed is what the owner said: the task's result, or
		// its answer when it made no task.
		want := `{"content":[]}`
		if f.taskID != "" {
			s.covered["world/task_relayed"]++
			wt := s.tasks[f.taskID]
			if wt == nil || !wt.ended() || wt.gone || wt.pid != f.pid {
				s.fail("relay %s for %s of task %s, which did not end there", f.id, f.pid, f.taskID)
				break
			}
			want = wt.result
		} else {
			s.covered["world/relay_no_task"]++
		}
		if f.result != want {
			s.fail("relay %s for %s says %s, the owner said %s", f.id, f.pid, f.result, want)
		}
		if !s.logged(f.pid, "fulfilled", "") {
			s.fail("relay for %s without a fulfilled line before it", f.pid)
		}
		v.relays = append(v.relays, f)
	case "prompt":
		if t.invalid || t.policy == "reject" || t.policy == "incapable" || t.policy == "fulfill" {
			s.fail("prompt for %s, which is %s", f.pid, t.policy)
		}
		// Recorded before it is sent: whoever holds the record next asks
		// it again with its ids.
		if !f.began.recorded {
			s.fail("%s sent prompt %s for %s, which its record does not hold", m.id, f.id, f.pid)
		}
		t.prompts[f.id] = f
	case "prompt_cancel":
		t.promptEnded[f.corr] = true
	}
}

// final checks the quiescent world: every claimed proposal answered
// once (or withdrawn), no prompt left open, the decision log consistent.
func (s *sim) final() error {
	for _, pid := range s.order {
		t := s.truth[pid]
		v := s.views[pid]
		answered := v.answered()
		// Exempt: a proposal refused at once whose claim (ClaimOnly, no
		// record) was won by a member that crashed before its reject went
		// out; fulfill does the same (claimAndAdmit) and says so.
		if t.claimed && !answered && !t.durableWd && !(t.claimOnly && t.busyLost) && !t.otherAnswered {
			return fmt.Errorf("%s was claimed (decision %s) but never answered", pid, t.claimID)
		}
		if answered && t.durableWd {
			return fmt.Errorf("%s was withdrawn, and answered too", pid)
		}
		for id, p := range t.prompts {
			if !t.promptEnded[id] {
				return fmt.Errorf("prompt %s to %s for %s left open", id, p.to, pid)
			}
		}
		// A task its record held ends by its result, or is cancelled at
		// its owner (or forgotten there): never left running for nobody.
		for tid, tp := range s.durableTasks {
			if tp != pid {
				continue
			}
			wt := s.tasks[tid]
			relayed := v != nil && slices.ContainsFunc(v.relays, func(f frame) bool { return f.taskID == tid })
			if !relayed && !wt.gone && (v == nil || !v.tasksCancelled[tid]) {
				return fmt.Errorf("task %s of %s (recorded) neither relayed nor cancelled (status %s)", tid, pid, wt.status)
			}
		}
		for _, l := range s.lines {
			if l.ProposalID != pid || !t.claimed {
				continue
			}
			switch l.Stage {
			case "rejected", "fulfilling", "fulfilled", "escalated", "withdrawn":
				if !t.decisionIDs[l.DecisionID] {
					return fmt.Errorf("%s line for %s carries decision %s, not its claim's %s nor one decided for it", l.Stage, pid, l.DecisionID, t.claimID)
				}
			}
		}
	}
	return nil
}

// logged reports whether a line of stage (with reason, when set) for pid
// was written.
func (s *sim) logged(pid, stage, reason string) bool {
	for _, l := range s.lines {
		if l.ProposalID == pid && l.Stage == stage && (reason == "" || l.Reason == reason) {
			return true
		}
	}
	return false
}

// quiesce stops the world's new work, heals the store, restarts every
// member and lets everything in flight finish, then checks that nothing
// is pending and every claimed proposal was answered exactly once.
func (s *sim) quiesce() error {
	s.quiescing = true
	s.failRate = 0
	if s.ownerAway && s.rng.IntN(2) == 0 {
		s.ownerMoves()
	}
	s.tracef("quiescing")
	for _, m := range s.members {
		if !m.alive {
			s.start(m)
		}
	}
	// A record owned by no live member (adopted from a member that is
	// back, say) is adopted by the first.
	for i := 0; i < 100000; i++ {
		s.step++
		switch {
		case s.deliverFrame():
		case s.runOp():
		case s.toolAnswers() && s.rng.IntN(2) == 0:
		case s.taskProgress():
		case s.approverAnswers() && s.rng.IntN(2) == 0:
		case s.fireTimer():
		default:
			for _, m := range s.members {
				if n := m.core.Pending(); n > 0 {
					return fmt.Errorf("quiescent, but %s still holds %d proposals: %v", m.id, n, m.core.Open())
				}
			}
			if len(s.store.recs) > 0 {
				var ids []string
				for id := range s.store.recs {
					ids = append(ids, id+" "+string(s.store.recs[id].data))
				}
				sort.Strings(ids)
				return fmt.Errorf("quiescent, but the store holds records: %v", ids)
			}
			if err := s.check(); err != nil {
				return err
			}
			return s.final()
		}
		if err := s.check(); err != nil {
			return fmt.Errorf("quiescing, step %d: %w", s.step, err)
		}
	}
	return fmt.Errorf("not quiescent after 100000 steps")
}

// humanAnswers: an approver (or a forger) answers a prompt of the core's
// own escalation seen on the wire (not one lost while its approver was
// away): accept, edit (allowed, or one the policy then rejects), decline,
// cancel, forged, unsigned, delegated (to one the form offered, or to
// one it did not), an error, a grant (offered, or not), an edit the form
// refuses, another JSON-RPC id, or never. An approver answers a prompt
// sent again the same way.
func (s *sim) humanAnswers() bool {
	var prompts []frame
	for _, f := range s.wire {
		if f.kind == "prompt" && !f.lost && !s.approversAway[f.to] {
			prompts = append(prompts, f)
		}
	}
	if len(prompts) == 0 {
		return false
	}
	f := prompts[s.rng.IntN(len(prompts))]
	plan, ok := s.promptPlan[f.id]
	if !ok {
		plans := []string{"accept", "accept", "accept", "edit", "edit-reject", "decline", "cancel", "forged", "unsigned", "never",
			"delegate", "delegate-bad", "error", "grant", "grant-bad", "edit-bad", "wrong-id"}
		plan = plans[s.rng.IntN(len(plans))]
		switch delegates, grants := (fakeCodec{}).Offers(f.payload); {
		case len(grants) > 0 && s.rng.IntN(2) == 0:
			plan = "grant" // offered: taken often enough to be seen
		case len(delegates) > 0 && s.rng.IntN(4) == 0:
			plan = "delegate" // likewise
		}
		s.promptPlan[f.id] = plan
	}
	a := fakeAnswer{Action: "accept", Approve: true, Signed: true}
	fr := frame{kind: "answer", id: s.newID(), from: f.to, corr: f.id, pid: f.pid, hasRPC: s.rng.IntN(2) == 0, rpc: f.rpc}
	delegates, grants := fakeCodec{}.Offers(f.payload)
	switch plan {
	case "never":
		return false
	case "edit":
		a.Params = policyParams("fulfill")
	case "edit-reject":
		a.Params = policyParams("reject")
	case "edit-bad":
		a.Params, a.Bad = policyParams("fulfill"), true
	case "decline":
		a.Action, a.Approve, a.Reason = "decline", false, "no"
	case "cancel":
		a.Action, a.Approve = "cancel", false
	case "forged":
		fr.from = "mallory"
		s.promptPlan[f.id] = "accept"
	case "unsigned":
		a.Signed = false
		s.promptPlan[f.id] = "decline"
	case "delegate":
		a.Approve = false
		if len(delegates) == 0 {
			a.Action = "decline"
		} else {
			a.DelegateTo = delegates[s.rng.IntN(len(delegates))]
			s.covered["world/delegated"]++
		}
	case "delegate-bad":
		a.Approve, a.DelegateTo = false, "mallory"
	case "error":
		a.Error = "the client cannot show forms"
	case "grant":
		if len(grants) > 0 {
			a.Grant = grants[s.rng.IntN(len(grants))]
		}
	case "grant-bad":
		a.Grant = "3000h"
	case "wrong-id":
		fr.hasRPC, fr.rpc = true, f.rpc+1000
		s.promptPlan[f.id] = "accept"
	}
	fr.payload = answerOf(a)
	t := s.truth[f.pid]
	if fr.from == f.to && plan != "wrong-id" && !(plan == "unsigned" && f.to == "alice") {
		// Closed by its answer (carol's key may change: an unsigned
		// answer of hers counts as closing, which only loosens the
		// check that no prompt is left open).
		t.promptEnded[f.id] = true
		if a.Action == "accept" && a.Approve {
			t.accepts[fr.from] = true
		}
	}
	s.tracef("%s answers prompt %s (%s)", fr.from, f.id, plan)
	s.broadcast(fr)
	return true
}

// approverMoves: an approver leaves the space or comes back (only back
// while the world quiesces). A prompt written while its approver is away
// is lost; the core asks again when it is back.
func (s *sim) approverMoves() bool {
	a := []string{"alice", "bob", "carol"}[s.rng.IntN(3)]
	if s.quiescing && !s.approversAway[a] {
		return false
	}
	s.approversAway[a] = !s.approversAway[a]
	kind := "join"
	if s.approversAway[a] {
		kind = "leave"
		s.covered["world/approver_left"]++
	} else {
		s.covered["world/approver_back"]++
	}
	s.tracef("approver %s %ss", a, kind)
	s.broadcast(frame{kind: kind, id: s.newID(), from: a})
	return true
}

// reconnect: a member's session with the space drops and comes back:
// the welcome's roster asks its open prompts again.
func (s *sim) reconnect() bool {
	m, ok := s.anyAlive()
	if !ok {
		return false
	}
	var present []string
	for _, a := range []string{"alice", "bob", "carol"} {
		if !s.approversAway[a] {
			present = append(present, a)
		}
	}
	s.tracef("%s reconnects", m.id)
	s.covered["world/reconnect"]++
	s.deliver(m, Roster{Present: present})
	return true
}

// keysChange: the approver keys file is reloaded, carol's key added or
// removed; every live member reads it.
func (s *sim) keysChange() bool {
	if slices.Contains(s.keyed, "carol") {
		s.keyed = fakeKeys{"alice"}
	} else {
		s.keyed = fakeKeys{"alice", "carol"}
	}
	s.covered["world/keys_changed"]++
	s.tracef("keys now %v", s.keyed)
	for _, m := range s.alive() {
		s.deliver(m, KeysChanged{Keys: s.keyed})
	}
	return true
}
