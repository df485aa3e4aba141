package elicit

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// Conn is what the Elicitor needs of the MEW session; *agent.Client has
// it. Answers come in through Handle (or Run), not through Conn, so that
// the Elicitor can keep waiting after a forged answer instead of giving up
// its request the way a one-shot request/response call would.
type Conn interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
	Participant(id string) (agent.Participant, bool)
	// NextRPCID hands out the JSON-RPC ids of the elicitations, from the
	// process's one sequence (agent.Client.NextRPCID), so that no peer
	// sees an id twice.
	NextRPCID() int64
}

// Config tunes an Elicitor. Zero values take the defaults in brackets.
type Config struct {
	// DefaultApprovers are asked when a decision names no approvers
	// (--approvers).
	DefaultApprovers []string
	// Keys are the approvers whose answers must be signed
	// (--approver-keys). Answers of other approvers are taken on the
	// gateway's word.
	Keys approval.Keys
	// PromptKey, when set, signs every elicitation/create
	// (--prompt-key): approvers' clients that pin its public key
	// (--fulfiller-keys) show only prompts whose signature verifies, since
	// the gateway does not authenticate from (docs/design.md "Proposer
	// identity and grants").
	PromptKey ed25519.PrivateKey
	// Passkeys are the approvers whose answers must carry a WebAuthn
	// assertion over the approval digest (--approver-keys lines
	// `<id> webauthn <credential>`; docs/protocol.md, "Signed approvals").
	Passkeys approval.Passkeys
	// CurrentKeys, when set, is the approver key set in force now, and
	// Keys and Passkeys are not read: the --approver-keys file reloaded
	// while the fulfiller runs (approverkeys.Watcher.Keys). It is read
	// when a prompt is sent and when each answer arrives, so it must be
	// quick and safe to call from any goroutine, and the set it returns
	// must never change afterwards.
	//
	// An answer is verified under the set in force when it arrives, never
	// under a key since removed or replaced: an approver who re-enrolled
	// counts with the new key only. A prompt sent while its approver was
	// keyed stays a signed-answer prompt: if the key is then removed, no
	// answer to it counts (it is ignored until the key is back or the
	// escalation ends), since an unsigned answer to it may be a forgery.
	CurrentKeys func() approval.ApproverKeys
	// Observer, when set, is told each step with each human. It is called
	// synchronously and must be quick.
	Observer func(Event)
	// OfferGrants lets escalations whose decision is grantable (and whose
	// quorum is 1: one person's word must not stand in for a two-person
	// rule later) offer a grant on the form. Off until the fulfiller
	// creates the grants approvers choose: a choice that does nothing must
	// not be offered.
	OfferGrants bool
	// SendTimeout bounds one envelope write [10s].
	SendTimeout time.Duration
	Logger      *slog.Logger     // [discard]
	Now         func() time.Time // [time.Now]
}

// Elicitor asks human approvers about escalated proposals with MCP
// elicitation (docs/protocol.md, "Escalation by MCP elicitation") and turns
// their answers into a fulfill.Verdict. It implements fulfill.Escalator.
//
// Each open escalation has one goroutine that owns its state: the prompts
// it has open, the approvals so far, its deadline. Escalate starts it;
// an answer, the deadline, Cancel or the end of the Escalate context stops
// it, and a stopped escalation cancels every prompt still open with MCP
// notifications/cancelled.
type Elicitor struct {
	conn Conn
	cfg  Config
	log  *slog.Logger

	base context.Context // sends; ends after Close has stopped every escalation
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	open   map[string]*escalation // by proposal id
	routes map[string]route       // by elicitation envelope id
	closed bool
}

// route says which escalation an elicitation belongs to and who alone may
// answer it.
type route struct {
	x        *escalation
	approver string
}

// New makes an Elicitor. With no keys configured it warns, once, that an
// approval is only as trustworthy as the gateway, which does not
// authenticate `from`.
func New(conn Conn, cfg Config) *Elicitor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 10 * time.Second
	}
	e := &Elicitor{conn: conn, cfg: cfg, log: cfg.Logger, open: map[string]*escalation{}, routes: map[string]route{}}
	e.base, e.stop = context.WithCancel(context.Background())
	LogKeys(cfg)
	return e
}

// LogKeys says what cfg's approver keys are at start, once: with none,
// that an approval is only as trustworthy as the gateway, which does not
// authenticate from; else who must sign and who need not. (A reloaded
// file's count is logged by whoever reloads it.)
func LogKeys(cfg Config) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	keyed := cfg.currentKeys().IDs()
	if len(keyed) == 0 && cfg.CurrentKeys == nil {
		log.Warn("no approver keys configured: approvals are taken on the gateway's word, and the gateway does not authenticate from, so an approval is only as trustworthy as the gateway and everyone in the space (see --approver-keys)")
	} else if len(keyed) == 0 {
		log.Warn("the approver keys file lists no approver yet: approvals are taken on the gateway's word until someone enrols (the file is reloaded when it changes)")
	} else {
		var unkeyed []string
		for _, id := range cfg.DefaultApprovers {
			if !slices.Contains(keyed, id) {
				unkeyed = append(unkeyed, id)
			}
		}
		if len(unkeyed) > 0 {
			log.Warn("approvers without a key: their answers are taken on the gateway's word", "approvers", unkeyed)
		}
		log.Info("signed approvals required", "approvers", keyed)
	}
}

// Escalate starts asking the approvers about one proposal and returns at
// once. done is called exactly once with the outcome, unless Cancel for the
// proposal (or the end of ctx) comes first.
func (e *Elicitor) Escalate(ctx context.Context, esc fulfill.Escalation, done func(fulfill.Verdict)) {
	id := esc.Proposal.ID
	x := &escalation{
		e:         e,
		esc:       esc,
		done:      done,
		id:        id,
		log:       e.log.With("proposal", id),
		started:   e.cfg.Now(),
		inbox:     make(chan agent.Envelope, 16),
		rejoined:  make(chan string, 16),
		stopped:   make(chan struct{}),
		cancelled: make(chan struct{}),
		seats:     map[string]*seat{},
		answered:  map[string]bool{},
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		done(fulfill.Verdict{Reason: "other", Message: "the fulfiller is shutting down; propose again later"})
		return
	}
	if _, dup := e.open[id]; dup {
		e.mu.Unlock()
		x.log.Error("escalation of a proposal that is already escalated; refused")
		done(fulfill.Verdict{Reason: "other", Message: "this proposal is already waiting for approval"})
		return
	}
	e.open[id] = x
	e.wg.Add(1)
	e.mu.Unlock()
	go x.run(ctx)
}

// Cancel stops asking about a proposal: every prompt still open gets
// notifications/cancelled with reason (withdrawn, superseded, timeout, …)
// and done will not be called. Cancelling a proposal that is not open, or
// whose outcome was already reported, does nothing.
func (e *Elicitor) Cancel(proposalID, reason string) {
	e.mu.Lock()
	x := e.open[proposalID]
	e.mu.Unlock()
	if x != nil {
		x.cancel(reason)
	}
}

// Handle takes one received envelope. Answers (mcp/response) to our
// elicitations go to their escalation; an answer from anyone but the
// approver the request was addressed to is ignored and logged. Our own
// system/welcome (a re-established session) and presence joins make open
// escalations ask again (see "Failures and recovery" in the package doc).
// Everything else is ignored silently. Handle may wait while an escalation
// is busy sending; it never waits for a stopped one.
func (e *Elicitor) Handle(env agent.Envelope) {
	switch env.Kind {
	case agent.KindResponse:
		e.onAnswer(env)
	case agent.KindWelcome:
		if env.AddressedTo(e.conn.ID()) {
			// The gateway replays nothing: prompts and answers sent while
			// our link was down are lost, so every open prompt is asked
			// again of whoever is here now.
			e.resync("")
		}
	case agent.KindPresence:
		var pr struct {
			Event       string `json:"event"`
			Participant struct {
				ID string `json:"id"`
			} `json:"participant"`
		}
		if agent.Unmarshal(env.Payload, &pr) == nil && pr.Event == "join" && pr.Participant.ID != "" && pr.Participant.ID != e.conn.ID() {
			e.resync(pr.Participant.ID)
		}
	}
}

// resync tells every open escalation that approver (every approver, when
// empty) may have missed prompts: its goroutine asks again.
func (e *Elicitor) resync(approver string) {
	e.mu.Lock()
	open := make([]*escalation, 0, len(e.open))
	for _, x := range e.open {
		open = append(open, x)
	}
	e.mu.Unlock()
	for _, x := range open {
		select {
		case x.rejoined <- approver:
		case <-x.stopped:
		}
	}
}

func (e *Elicitor) onAnswer(env agent.Envelope) {
	rid := env.CorrelationID.First()
	e.mu.Lock()
	r, ok := e.routes[rid]
	e.mu.Unlock()
	if !ok {
		return // not an answer to an open elicitation of ours
	}
	if env.From != r.approver {
		r.x.log.Warn("answer to an elicitation from a participant it was not sent to; ignored",
			"request", rid, "approver", r.approver, "from", env.From, "envelope", env.ID)
		r.x.emit(Event{Kind: EventIgnored, ProposalID: r.x.id, Approver: r.approver, From: env.From, RequestID: rid, Reason: "not addressed to " + env.From})
		return
	}
	select {
	case r.x.inbox <- env:
	case <-r.x.stopped:
	}
}

// Kinds are the envelope kinds an Elicitor needs to see (subscribe to
// them, addressed to us or to everyone, and pass the channel to Run):
// answers, our own welcomes (a re-established session) and presence (an
// approver coming back), the last two to ask again what a dropped link
// lost.
var Kinds = []string{agent.KindResponse, agent.KindWelcome, agent.KindPresence}

// Run hands every envelope from in to Handle until in is closed or ctx
// ends. Subscribe to Kinds and pass the channel: without the welcome and
// presence kinds, prompts lost in a reconnect are never asked again.
func (e *Elicitor) Run(ctx context.Context, in <-chan agent.Envelope) error {
	for {
		select {
		case env, ok := <-in:
			if !ok {
				return nil
			}
			e.Handle(env)
		case <-ctx.Done():
			return nil
		}
	}
}

// Close cancels every open escalation (their prompts get
// notifications/cancelled with reason "shutdown"; done is not called) and
// waits for their goroutines. Escalations after Close are refused.
func (e *Elicitor) Close() error {
	e.mu.Lock()
	e.closed = true
	open := make([]*escalation, 0, len(e.open))
	for _, x := range e.open {
		open = append(open, x)
	}
	e.mu.Unlock()
	for _, x := range open {
		x.cancel("shutdown")
	}
	e.wg.Wait()
	e.stop()
	return nil
}

// Open reports how many escalations are waiting for humans.
func (e *Elicitor) Open() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.open)
}

func (e *Elicitor) route(requestID string, x *escalation, approver string) {
	e.mu.Lock()
	e.routes[requestID] = route{x: x, approver: approver}
	e.mu.Unlock()
}

// forget drops an ended escalation: later answers to its prompts are
// ignored.
func (e *Elicitor) forget(x *escalation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range x.seats {
		delete(e.routes, id)
	}
	if e.open[x.id] == x {
		delete(e.open, x.id)
	}
}

func (e *Elicitor) send(env agent.Envelope) error {
	ctx, cancel := context.WithTimeout(e.base, e.cfg.SendTimeout)
	defer cancel()
	_, err := e.conn.Send(ctx, env)
	return err
}

// sendCancellation sends a notifications/cancelled. When the link is
// down it is kept and sent after the reconnect, if the connection can
// (fulfill.Queuer): an approver must not be left with a prompt that no
// longer counts.
func (e *Elicitor) sendCancellation(env agent.Envelope) error {
	q, ok := e.conn.(fulfill.Queuer)
	if !ok {
		return e.send(env)
	}
	ctx, cancel := context.WithTimeout(e.base, e.cfg.SendTimeout)
	defer cancel()
	_, queued, err := q.SendOrQueue(ctx, env)
	if queued {
		e.log.Warn("cancellation of a prompt kept until the link is back", "approver", env.To, "request", env.CorrelationID.First())
	}
	return err
}

func (e *Elicitor) emit(ev Event) {
	if e.cfg.Observer == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = e.cfg.Now()
	}
	e.cfg.Observer(ev)
}

// emit reports a step of this escalation, naming the decision behind it.
func (x *escalation) emit(ev Event) {
	ev.DecisionID, ev.Revision = x.esc.DecisionID, x.esc.Decision.Revision
	x.e.emit(ev)
}

func (e *Elicitor) online(id string) bool {
	if id == "" || id == e.conn.ID() {
		return false
	}
	_, ok := e.conn.Participant(id)
	return ok
}

// escalation is one proposal waiting for humans. Fields below the mutex
// are owned by its goroutine.
type escalation struct {
	e        *Elicitor
	esc      fulfill.Escalation
	done     func(fulfill.Verdict)
	id       string
	log      *slog.Logger
	started  time.Time
	inbox    chan agent.Envelope
	rejoined chan string   // an approver (or, when empty, we) joined again
	stopped  chan struct{} // closed when the goroutine has ended

	mu           sync.Mutex
	cancelled    chan struct{} // closed by cancel
	cancelReason string
	finished     bool // done has been (or is being) called

	// plan is what the decision's reminders and escalate_to still have to
	// do, earliest first; each step is done once, at x.since + at.
	plan  []step
	since time.Time // when the reminders and tiers count from

	call      call
	digest    string
	approvers []string // who may answer: the decision's approvers, else the defaults
	quorum    int
	fields    []field
	seats     map[string]*seat // by elicitation envelope id
	order     []*seat
	answered  map[string]bool // approvers who answered (or handed on) a prompt
	approvals []approved
	lastErr   string // why a prompt could not be asked or counted, for the reject message
	// storeErr is why a prompt or an approval could not be recorded
	// (Escalation.RecordPrompt/RecordApproval): the escalation ends.
	storeErr error
	// announced: EventOpened was emitted, so EventEnded is owed;
	// outcome and outcomeWhy are what it will say.
	announced           bool
	outcome, outcomeWhy string
}

// seat is one elicitation request: one approver asked once.
type seat struct {
	requestID string // envelope id; answers name it in correlation_id
	rpcID     int64  // JSON-RPC id; notifications/cancelled name it
	approver  string
	// signed: the approver was keyed when this prompt was registered (a
	// resumed prompt: when it was taken up), so its answer must be signed
	// even if the key is removed meanwhile (Config.CurrentKeys).
	signed    bool
	chain     []string // approvers who handed this request on, in order
	delegates []string // whom the form offered as delegate_to
	grants    []string // the grant durations the form offered
	open      bool
	recorded  bool // in the pending-work store (Escalation.RecordPrompt)
	// prompt is the elicitation exactly as first sent: asking again
	// re-sends it unchanged (same envelope id, JSON-RPC id and bytes), so
	// the approver's client can tell it is the same question.
	prompt agent.Envelope
}

// approved is one accepted approve:true answer.
type approved struct {
	approver string
	key      string           // the approved call: "" as proposed, else its canonical params
	params   json.RawMessage  // edited params; nil as proposed
	content  json.RawMessage  // canonical form content without the signature
	evidence *grants.Evidence // a signed answer, as signed
}

func (x *escalation) run(ctx context.Context) {
	defer x.e.wg.Done()
	defer close(x.stopped)
	defer x.e.forget(x)
	defer x.announceEnd()
	if v, end := x.start(); end {
		x.finish(v)
		return
	}
	x.announceOpen()
	timer := time.NewTimer(x.esc.Deadline.Sub(x.e.cfg.Now()))
	defer timer.Stop()
	// The reminders and tiers share one timer, set to whichever is next:
	// this goroutine owns it, so nothing fires after the escalation ends.
	sched := time.NewTimer(time.Hour)
	sched.Stop() // no stale fire since Go 1.23: Reset sets it afresh
	defer sched.Stop()
	x.schedule(sched)
	for {
		select {
		case <-sched.C:
			if v, end := x.due(); end {
				x.finish(v)
				return
			}
			x.schedule(sched)
		case env := <-x.inbox:
			if v, end := x.answer(env); end {
				x.finish(v)
				return
			}
		case who := <-x.rejoined:
			if v, end := x.askAgain(who); end {
				x.finish(v)
				return
			}
		case <-timer.C:
			x.finish(x.timedOut())
			return
		case <-x.cancelled:
			x.mu.Lock()
			reason := x.cancelReason
			x.mu.Unlock()
			x.cancelOpen(reason)
			x.outcome, x.outcomeWhy = OutcomeCancelled, reason
			return
		case <-ctx.Done():
			x.cancelOpen("shutdown")
			x.outcome, x.outcomeWhy = OutcomeCancelled, "shutdown"
			return
		}
	}
}

// step is one reminder (tier nil) or one tier of escalate_to.
type step struct {
	at   time.Duration
	tier *decision.Tier
}

// plan lays out the decision's reminders and tiers in time order, from
// since (the escalation's start; after a restart, when its first prompt
// was sent). Steps not before the deadline are dropped, with a log line:
// the prompt has ended by then (the policy's timeout is checked when it
// is written, but the deadline may be --approval-timeout or the
// proposer's own, sooner one). Steps whose time passed while the
// escalation was not held (a restart) are returned as passed: their
// tiers are asked at once; their reminders are not sent late.
func (x *escalation) makePlan(since, now time.Time) (passed []step) {
	d := x.esc.Decision
	x.since = since
	var all []step
	for _, r := range d.Reminders {
		all = append(all, step{at: r})
	}
	for i := range d.EscalateTo {
		all = append(all, step{at: d.EscalateTo[i].After, tier: &d.EscalateTo[i]})
	}
	// Stable: at the same time, reminders (listed first) go before the
	// tier, so a reminder is not also sent to those just asked.
	slices.SortStableFunc(all, func(a, b step) int { return cmp.Compare(a.at, b.at) })
	for _, st := range all {
		when := since.Add(st.at)
		switch {
		case !when.Before(x.esc.Deadline):
			what := "reminder"
			if st.tier != nil {
				what = "escalate_to tier"
			}
			x.log.Warn(what+" not before the deadline; it will not happen", "after", st.at, "deadline", x.esc.Deadline)
		case !when.After(now):
			passed = append(passed, st)
		default:
			x.plan = append(x.plan, st)
		}
	}
	return passed
}

// schedule sets t to the next step of the plan; t has fired or is new.
func (x *escalation) schedule(t *time.Timer) {
	if len(x.plan) == 0 {
		return
	}
	t.Reset(x.since.Add(x.plan[0].at).Sub(x.e.cfg.Now()))
}

// due does every step whose time has come.
func (x *escalation) due() (fulfill.Verdict, bool) {
	now := x.e.cfg.Now()
	for len(x.plan) > 0 && !x.since.Add(x.plan[0].at).After(now) {
		st := x.plan[0]
		x.plan = x.plan[1:]
		if st.tier == nil {
			x.remind(st.at)
			continue
		}
		x.escalateTo(*st.tier, true)
	}
	return x.settle()
}

// remind announces the escalation again (prompt.reminder) to the
// approvers still waited for. Nothing goes on the wire: an approver's
// client already shows the open prompt, and asking it again with the
// same ids is ignored by design (approver.Client shows a question once).
func (x *escalation) remind(at time.Duration) {
	waiting := x.waitingFor()
	if len(waiting) == 0 {
		return
	}
	x.log.Info("reminder: the prompt is still open", "after", at, "waiting_for", waiting)
	x.emit(Event{Kind: EventReminded, ProposalID: x.id, Prompt: x.prompt(waiting)})
}

// waitingFor are the approvers whose answer could still come: those with
// an open prompt, then listed approvers not asked yet (away from the
// space) who have not answered; never the proposer.
func (x *escalation) waitingFor() []string {
	var out []string
	for _, s := range x.order {
		if s.open && !slices.Contains(out, s.approver) {
			out = append(out, s.approver)
		}
	}
	for _, a := range x.approvers {
		if a != x.esc.Proposal.From && !x.answered[a] && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// escalateTo makes a tier's approvers approvers of this escalation too:
// each counts toward the same quorum, once, and the deadline stays.
// Those in the space are asked now; the others when they come in (a
// listed approver who joins is asked: askAgain). Their prompts, and
// every prompt sent from now on, list all the approvers so far in
// _meta.policy.approvers. announce: tell the observer (prompt.escalated);
// not for a tier whose time passed during a restart, which the resumed
// escalation's prompt.opened already names.
func (x *escalation) escalateTo(t decision.Tier, announce bool) {
	var added []string
	for _, a := range t.Approvers {
		if !slices.Contains(x.approvers, a) {
			added = append(added, a)
		}
	}
	if len(added) == 0 {
		return
	}
	x.approvers = append(slices.Clone(x.approvers), added...)
	var asked []*seat
	for _, a := range added {
		switch {
		case a == x.esc.Proposal.From:
			x.log.Warn("the proposer is listed as an approver of its own proposal; not asked", "approver", a)
			x.emit(Event{Kind: EventSkipped, ProposalID: x.id, Approver: a, Reason: "the proposer cannot approve its own proposal"})
		case x.answered[a] || x.holdsOpen(a):
			// Already asked as a delegate: one prompt each.
		case !x.e.online(a):
			x.log.Info("escalated to an approver not in the space; asked when they come in", "approver", a)
			x.emit(Event{Kind: EventSkipped, ProposalID: x.id, Approver: a, Reason: "not in the space"})
		default:
			asked = append(asked, x.newSeat(a, nil))
		}
	}
	x.log.Info("escalated", "after", t.After, "approvers", added, "deadline", x.esc.Deadline)
	if announce {
		x.emit(Event{Kind: EventEscalated, ProposalID: x.id, Prompt: x.prompt(added)})
	}
	for _, s := range asked {
		x.ask(s)
	}
}

func (x *escalation) cancel(reason string) {
	if reason == "" {
		reason = "cancelled"
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.finished || x.cancelReason != "" {
		return
	}
	x.cancelReason = reason
	close(x.cancelled)
}

// finish cancels what is still open and reports the outcome, unless Cancel
// came first.
func (x *escalation) finish(v fulfill.Verdict) {
	reason := v.Reason
	if v.Approved {
		reason = "approved"
	}
	if errors.Is(x.storeErr, state.ErrConflict) {
		reason = fulfill.DropReason // another member asks these prompts now
	}
	x.cancelOpen(reason)
	x.mu.Lock()
	if x.cancelReason != "" {
		x.outcome, x.outcomeWhy = OutcomeCancelled, x.cancelReason
		x.mu.Unlock()
		return
	}
	x.outcome, x.outcomeWhy = reason, v.Message
	if v.Approved {
		x.outcomeWhy = ""
	}
	x.finished = true
	x.mu.Unlock()
	if v.Approved {
		x.log.Info("approved", "by", v.By, "edited", v.Params != nil)
	} else {
		x.log.Info("not approved", "reason", v.Reason, "message", v.Message)
	}
	x.done(v)
}

// prompt describes the escalation for EventOpened and EventEnded; asked
// are the approvers to name.
func (x *escalation) prompt(asked []string) *Prompt {
	p := &Prompt{Proposer: x.esc.Proposal.From, Method: x.esc.Method, Tool: x.call.tool, Target: x.esc.Target, Digest: x.digest,
		Asked: asked, Quorum: x.quorum, Deadline: x.esc.Deadline, Resumed: len(x.esc.Prompts) > 0 || len(x.esc.Approvals) > 0}
	if x.esc.Decision.NotifyArguments {
		p.Arguments = callArguments(x.esc.Method, x.esc.Params)
	}
	return p
}

// callArguments are what a notification shows as the call's arguments:
// a tools/call's params.arguments, another method's params.
func callArguments(method string, params json.RawMessage) json.RawMessage {
	if method != agent.MethodToolsCall {
		return params
	}
	var p struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if agent.Unmarshal(params, &p) != nil {
		return nil
	}
	return p.Arguments
}

// announceOpen tells the observer the escalation is open, naming the
// approvers whose prompts are open now.
func (x *escalation) announceOpen() {
	var asked []string
	for _, s := range x.order {
		if s.open && !slices.Contains(asked, s.approver) {
			asked = append(asked, s.approver)
		}
	}
	x.announced = true
	x.emit(Event{Kind: EventOpened, ProposalID: x.id, Prompt: x.prompt(asked)})
}

// announceEnd tells the observer how an announced escalation ended. Not
// when it was dropped for a group member that adopted it: for the people
// waiting on it, it has not ended, and the adopter announces it again.
func (x *escalation) announceEnd() {
	if !x.announced || x.outcomeWhy == fulfill.DropReason || errors.Is(x.storeErr, state.ErrConflict) {
		return
	}
	var asked []string
	for _, s := range x.order {
		if !slices.Contains(asked, s.approver) {
			asked = append(asked, s.approver)
		}
	}
	outcome := x.outcome
	if outcome == "" {
		outcome = OutcomeCancelled // every way out sets it; fail towards "no longer open"
	}
	x.emit(Event{Kind: EventEnded, ProposalID: x.id, Prompt: x.prompt(asked), Outcome: outcome, Reason: x.outcomeWhy})
}

// start works out whom to ask and asks them.
func (x *escalation) start() (fulfill.Verdict, bool) {
	d := x.esc.Decision
	x.approvers = d.Approvers
	if len(x.approvers) == 0 {
		x.approvers = x.e.cfg.DefaultApprovers
	}
	x.quorum = max(d.Quorum, 1)
	if !x.esc.Deadline.After(x.e.cfg.Now()) {
		return x.timedOut(), true
	}
	if len(x.approvers) == 0 {
		return fulfill.Verdict{Reason: "incapable", Message: "the policy asks for human approval, but names no approvers and none are configured (--approvers)"}, true
	}
	digest, err := approval.CallDigest(x.esc.Method, x.esc.Params)
	if err != nil {
		return fulfill.Verdict{Reason: "invalid", Message: "the call cannot be shown to an approver: " + err.Error()}, true
	}
	x.digest = digest
	x.call = parseCall(x.esc.Method, x.esc.Params)
	x.fields = editableFields(x.call, x.esc.InputSchema, d.Editable, x.log)
	if len(x.esc.Prompts) > 0 || len(x.esc.Approvals) > 0 {
		return x.resume()
	}
	x.makePlan(x.started, x.started)

	var online []string
	for _, a := range x.approvers {
		switch {
		case a == x.esc.Proposal.From:
			x.log.Warn("the proposer is listed as an approver of its own proposal; not asked", "approver", a)
			x.emit(Event{Kind: EventSkipped, ProposalID: x.id, Approver: a, Reason: "the proposer cannot approve its own proposal"})
		case !x.e.online(a):
			x.log.Info("approver not in the space; not asked", "approver", a)
			x.emit(Event{Kind: EventSkipped, ProposalID: x.id, Approver: a, Reason: "not in the space"})
		default:
			online = append(online, a)
		}
	}
	if len(online) < x.quorum {
		return fulfill.Verdict{Reason: "incapable", Message: x.tooFew(online)}, true
	}
	seats := make([]*seat, len(online))
	for i, a := range online {
		seats[i] = x.newSeat(a, nil)
	}
	for _, s := range seats {
		x.ask(s)
	}
	return x.settle()
}

// resume takes up an escalation recorded before a restart or by a group
// member whose lease lapsed: approvals already counted count again (once
// each), and every prompt still open is asked again with its envelope and
// JSON-RPC ids, so the approver's client sees the same question and an
// answer to the earlier copy (sent to whoever asked it, seen by all) counts.
func (x *escalation) resume() (fulfill.Verdict, bool) {
	// The reminders and tiers count from when the escalation first asked
	// (its earliest recorded prompt): a restart does not start them over.
	since := x.started
	for _, pr := range x.esc.Prompts {
		if !pr.Sent.IsZero() && pr.Sent.Before(since) {
			since = pr.Sent
		}
	}
	for _, st := range x.makePlan(since, x.started) {
		if st.tier != nil {
			// Listed before the prompts are taken up, so that askAgain
			// asks those of them who hold no prompt yet.
			for _, a := range st.tier.Approvers {
				if !slices.Contains(x.approvers, a) {
					x.approvers = append(slices.Clone(x.approvers), a)
				}
			}
		}
	}
	for _, a := range x.esc.Approvals {
		if x.answered[a.Approver] {
			continue // one approver counts once
		}
		params, callKey, err := applyEdits(x.call, x.fields, readForm(a.Content))
		if err != nil {
			x.log.Warn("recorded approval cannot be used; not counted", "approver", a.Approver, "err", err)
			continue
		}
		ap := approved{approver: a.Approver, key: callKey, params: params, content: a.Content}
		if a.Signature != "" {
			ap.evidence = &grants.Evidence{Request: a.Request, Digest: x.digest, Action: approval.ActionAccept, Content: a.Content, Signature: a.Signature}
		}
		x.approvals = append(x.approvals, ap)
		x.answered[a.Approver] = true
	}
	handedOn := map[string]bool{}
	for _, pr := range x.esc.Prompts {
		for _, by := range pr.Chain {
			handedOn[by] = true
		}
	}
	var again []*seat
	for _, pr := range x.esc.Prompts {
		s := &seat{requestID: pr.EnvelopeID, rpcID: pr.RPCID, approver: pr.Approver, chain: pr.Chain, recorded: true}
		// Keyed when first asked (the record says so) or keyed now: an
		// answer must be signed. A restart must not turn a prompt whose
		// approver's key was removed into one any participant can answer.
		s.signed = pr.Signed || x.e.cfg.currentKeys().Has(pr.Approver)
		s.open = !x.answered[pr.Approver] && !handedOn[pr.Approver]
		if len(pr.Payload) > 0 {
			s.prompt = agent.Envelope{ID: pr.EnvelopeID, To: []string{pr.Approver}, Kind: agent.KindRequest, Payload: pr.Payload}
			s.delegates = offeredDelegates(pr.Payload)
			s.grants = offeredGrants(pr.Payload)
		}
		x.seats[s.requestID] = s
		x.order = append(x.order, s)
		x.e.route(s.requestID, x, s.approver)
		if s.open {
			again = append(again, s)
		}
	}
	x.log.Info("escalation resumed", "prompts", len(x.esc.Prompts), "open", len(again), "approvals", len(x.approvals))
	if v, end := x.settle(); end {
		return v, end
	}
	// Asked again exactly as first sent (askAgain re-sends s.prompt, or
	// asks afresh a prompt recorded without its payload).
	return x.askAgain("")
}

// offeredDelegates reads the delegate_to choices a recorded prompt
// offered, so that a resumed prompt accepts the same delegations.
func offeredDelegates(payload json.RawMessage) []string {
	return offeredEnum(payload, approval.FieldDelegateTo)
}

// offeredGrants reads the grant durations a recorded prompt offered, so
// that a resumed prompt accepts the same choices (the stored decision is
// not needed to know them).
func offeredGrants(payload json.RawMessage) []string {
	return slices.DeleteFunc(offeredEnum(payload, approval.FieldGrant), func(g string) bool { return g == "" })
}

// offeredEnum reads the enum of one field of a recorded prompt's form.
func offeredEnum(payload json.RawMessage, name string) []string {
	var p struct {
		Params struct {
			RequestedSchema struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"requestedSchema"`
		} `json:"params"`
	}
	if agent.Unmarshal(payload, &p) != nil {
		return nil
	}
	return p.Params.RequestedSchema.Properties[name].Enum
}

// grantOffers are the grant durations this escalation's form offers: none
// unless grants are on, the decision is grantable and one approval decides.
func (x *escalation) grantOffers() []string {
	g := x.esc.Decision.Grantable
	if !x.e.cfg.OfferGrants || g == nil || x.quorum != 1 {
		return nil
	}
	var out []string
	for _, d := range g.Offers() {
		out = append(out, decision.FormatGrantDuration(d))
	}
	return out
}

// metaFor is the prompt's _meta: the proposal and policy as every prompt
// has them, and, when a grant is offered, what it would pin, so that the
// approver sees exactly how wide "calls like this" is.
func (x *escalation) metaFor(s *seat) object {
	m := meta(x.esc, x.digest, x.quorum, x.approvers, x.fields, s.chain)
	if g := x.esc.Decision.Grantable; g != nil && len(s.grants) > 0 {
		scope := make([]string, len(g.Scope))
		for i, f := range g.Scope {
			scope[i] = f.String()
		}
		m.add("grant", object{{"max_ttl", decision.FormatGrantDuration(g.MaxTTL)}, {"scope", scope}, {"offers", s.grants}})
	}
	return m
}

func (x *escalation) tooFew(online []string) string {
	listed := strings.Join(x.approvers, ", ")
	if len(online) == 0 {
		return fmt.Sprintf("none of the approvers (%s) is in the space to approve this", listed)
	}
	verb := "are"
	if len(online) == 1 {
		verb = "is"
	}
	return fmt.Sprintf("%s needed, but only %d of the approvers (%s) %s in the space: %s",
		approvals(x.quorum), len(online), listed, verb, strings.Join(online, ", "))
}

// approvals says "1 approval", "2 approvals".
func approvals(n int) string {
	if n == 1 {
		return "1 approval"
	}
	return fmt.Sprintf("%d approvals", n)
}

// newSeat registers a prompt before it is sent: its answer may arrive
// before Send returns.
func (x *escalation) newSeat(approver string, chain []string) *seat {
	s := &seat{requestID: agent.NewID(x.e.conn.ID() + "-elicit"), rpcID: x.e.conn.NextRPCID(), approver: approver, chain: chain, open: true}
	s.signed = x.e.cfg.currentKeys().Has(approver)
	x.seats[s.requestID] = s
	x.order = append(x.order, s)
	x.e.route(s.requestID, x, approver)
	return s
}

// ask sends the elicitation for s.
func (x *escalation) ask(s *seat) {
	s.delegates = x.delegatesFor(s.approver, s.chain)
	s.grants = x.grantOffers()
	m := x.metaFor(s)
	params := object{
		{"message", message(x.esc, x.call, x.digest, x.quorum, s.chain)},
		{"requestedSchema", schema(x.fields, s.delegates, s.grants)},
		{"_meta", m},
	}
	if key := x.e.cfg.PromptKey; key != nil {
		// Signed as sent, before it is recorded: a restart or an adopter
		// re-sends these bytes, and the signature still names this signer.
		sig, err := approval.SignPrompt(key, s.requestID, mustMarshal(s.rpcID), s.approver, x.digest, mustMarshal(params))
		if err != nil {
			s.open = false
			x.lastErr = fmt.Sprintf("the request to %s could not be signed", s.approver)
			x.log.Error("elicitation not signed; not sent", "approver", s.approver, "request", s.requestID, "err", err)
			return
		}
		m.add(approval.MetaPromptSignature, object{{"signer", x.e.conn.ID()}, {"signature", sig}})
		params[2].value = m
	}
	payload := object{{"jsonrpc", "2.0"}, {"id", s.rpcID}, {"method", agent.MethodElicitationCreate}, {"params", params}}
	env := agent.Envelope{ID: s.requestID, To: []string{s.approver}, Kind: agent.KindRequest, Payload: mustMarshal(payload)}
	s.prompt = env
	if rec := x.esc.RecordPrompt; rec != nil && !s.recorded {
		// Recorded before it is sent: a restart or an adopter asks it
		// again with the same ids. Not recorded, not sent (fail closed).
		if err := rec(state.Prompt{Approver: s.approver, EnvelopeID: s.requestID, RPCID: s.rpcID, Chain: s.chain, Sent: x.e.cfg.Now().UTC(), Payload: env.Payload, Signed: s.signed}); err != nil {
			s.open = false
			x.storeErr = err
			x.log.Error("elicitation not recorded in the pending-work store; not sent", "approver", s.approver, "request", s.requestID, "err", err)
			return
		}
		s.recorded = true
	}
	if err := x.e.send(env); err != nil {
		s.open = false
		x.lastErr = fmt.Sprintf("the request to %s could not be sent", s.approver)
		x.log.Error("elicitation not sent", "approver", s.approver, "request", s.requestID, "err", err)
		return
	}
	x.log.Info("asked approver", "approver", s.approver, "request", s.requestID, "delegated_by", s.chain)
	x.emit(Event{Kind: EventAsked, ProposalID: x.id, Approver: s.approver, RequestID: s.requestID})
}

// askAgain recovers from a link that went down while the escalation was
// open (docs/protocol.md's gateway replays nothing). who joined the space again
// — or, when who is empty, we did, with a new welcome. Every prompt still
// open at an approver who is here now is sent again unchanged; a listed
// approver who is here, holds no open prompt and has not answered (they
// were away when we asked, or their prompt could not be sent) is asked now.
// An approver's answer that was lost comes back when their client sees the
// same prompt again (approver.Client re-sends its recorded answer); one
// that arrives twice is ignored as "already answered".
func (x *escalation) askAgain(who string) (fulfill.Verdict, bool) {
	for _, s := range x.order {
		if !s.open || (who != "" && s.approver != who) || !x.e.online(s.approver) {
			continue
		}
		if s.prompt.ID == "" {
			x.ask(s) // resumed while its approver was away: never sent by us
			continue
		}
		if err := x.e.send(s.prompt); err != nil {
			// The first copy may still have arrived: keep the prompt open.
			x.log.Warn("elicitation not sent again", "approver", s.approver, "request", s.requestID, "err", err)
			continue
		}
		x.log.Info("asked approver again after a reconnect", "approver", s.approver, "request", s.requestID)
		x.emit(Event{Kind: EventAskedAgain, ProposalID: x.id, Approver: s.approver, RequestID: s.requestID})
	}
	var late []*seat
	for _, a := range x.approvers {
		if (who != "" && a != who) || a == x.esc.Proposal.From || x.answered[a] || x.holdsOpen(a) || !x.e.online(a) {
			continue
		}
		x.log.Info("approver came into the space; asked", "approver", a)
		late = append(late, x.newSeat(a, nil))
	}
	for _, s := range late {
		x.ask(s)
	}
	return x.settle()
}

// delegatesFor lists whom a prompt at approver may be handed on to: other
// listed approvers who are in the space and have not answered, never back
// along the chain, at most MaxDelegationHops times. With a quorum above one,
// approvers already asked are left out: handing them a second prompt would
// cost a distinct approval.
func (x *escalation) delegatesFor(approver string, chain []string) []string {
	if len(chain) >= MaxDelegationHops {
		return nil
	}
	var out []string
	for _, a := range x.approvers {
		switch {
		case a == approver, slices.Contains(chain, a), a == x.esc.Proposal.From, x.answered[a], !x.e.online(a):
		case x.quorum > 1 && x.holdsOpen(a):
		default:
			out = append(out, a)
		}
	}
	return out
}

func (x *escalation) holdsOpen(approver string) bool {
	for _, s := range x.order {
		if s.open && s.approver == approver {
			return true
		}
	}
	return false
}

// answer applies one answer from the approver its prompt was addressed to.
func (x *escalation) answer(env agent.Envelope) (fulfill.Verdict, bool) {
	rid := env.CorrelationID.First()
	s := x.seats[rid]
	if s == nil || !s.open {
		x.log.Info("second answer to an elicitation ignored", "request", rid, "approver", env.From)
		x.emit(Event{Kind: EventIgnored, ProposalID: x.id, Approver: env.From, From: env.From, RequestID: rid, Reason: "already answered"})
		return fulfill.Verdict{}, false
	}
	ignore := func(why string) (fulfill.Verdict, bool) {
		x.log.Warn("answer ignored: "+why, "approver", s.approver, "request", rid, "envelope", env.ID)
		x.emit(Event{Kind: EventIgnored, ProposalID: x.id, Approver: s.approver, From: env.From, RequestID: rid, Reason: why})
		return fulfill.Verdict{}, false
	}
	// Matched by correlation and sender (rule 12): an approver's client
	// built on the reference SDK echoes no JSON-RPC id; one that does
	// must echo this prompt's.
	if _, err := agent.DecodeAnswer(env.Payload, strconv.AppendInt(nil, s.rpcID, 10)); errors.Is(err, agent.ErrWrongRPCID) {
		return ignore(err.Error())
	}
	// The keys in force now, not when the prompt was sent: a replaced
	// key (a lost device, re-enrolled) no longer verifies anything, and
	// an approver keyed since must sign.
	verify := verifier(x.e.cfg.currentKeys(), s.approver)
	a := parseAnswer(env.Payload)
	if a.outcome == outcomeIgnored {
		return ignore(a.why)
	}
	if verify == nil && s.signed {
		// Fail closed: the prompt asked for a signed answer, and the key
		// that would verify it was removed since. Taking the answer on
		// the gateway's word now would let anyone answer for them.
		return ignore(s.approver + "'s key was removed after they were asked: the answer cannot be verified")
	}
	if a.outcome == outcomeError {
		if verify != nil {
			// An error cannot be signed: taking it would let anyone close
			// a keyed approver's prompt.
			return ignore("an error answer cannot be signed, and " + s.approver + " must sign")
		}
		s.open = false
		x.answered[s.approver] = true
		x.lastErr = fmt.Sprintf("%s's client could not show the request (%s)", s.approver, a.rpcErr.Message)
		x.log.Warn("approver's client answered with an error", "approver", s.approver, "code", a.rpcErr.Code, "error", a.rpcErr.Message)
		x.emit(Event{Kind: EventAnswered, ProposalID: x.id, Approver: s.approver, RequestID: rid, Reason: a.rpcErr.Message})
		return x.settle()
	}
	r := result{Action: a.action, Content: a.content}
	if verify != nil {
		if err := verify(s.requestID, x.digest, r.Action, r.Content); err != nil {
			x.log.Warn("forgery attempt: answer for a keyed approver is unsigned or badly signed; ignored",
				"approver", s.approver, "request", rid, "from", env.From, "envelope", env.ID, "action", r.Action, "err", err)
			x.emit(Event{Kind: EventForgery, ProposalID: x.id, Approver: s.approver, From: env.From, RequestID: rid, Action: r.Action, Reason: err.Error()})
			return fulfill.Verdict{}, false
		}
	}
	s.open = false
	x.answered[s.approver] = true
	f := a.form
	ev := Event{Kind: EventAnswered, ProposalID: x.id, Approver: s.approver, RequestID: rid, Action: r.Action, Reason: f.reason}
	switch a.outcome {
	case outcomeCancel:
		x.emit(ev)
		return fulfill.Verdict{Reason: "other", By: []string{s.approver}, Message: s.approver + " dismissed the approval request without deciding"}, true
	case outcomeDecline:
		x.emit(ev)
		msg := s.approver + " declined"
		if f.reason != "" {
			msg += ": " + f.reason
		}
		return fulfill.Verdict{Reason: "disagree", By: []string{s.approver}, Message: msg}, true
	case outcomeDelegate:
		return x.delegate(s, f.delegateTo)
	}
	ev.Approve = true
	if f.grantBad || (f.grant != "" && !slices.Contains(s.grants, f.grant)) {
		// Fail closed: the approver asked for something the form did not
		// offer (or a client invented the field): neither the grant nor
		// the approval it came with is taken.
		x.emit(ev)
		return fulfill.Verdict{Reason: "other", By: []string{s.approver}, Message: fmt.Sprintf("%s's approval cannot be used: the grant %s was not offered", s.approver, clip(string(f.fields[approval.FieldGrant]), 40))}, true
	}
	params, callKey, err := applyEdits(x.call, x.fields, f)
	if err != nil {
		x.emit(ev)
		return fulfill.Verdict{Reason: "other", By: []string{s.approver}, Message: fmt.Sprintf("%s's approval cannot be used: %v", s.approver, err)}, true
	}
	content, sig, _ := approval.SplitSignature(r.Content)
	var evidence *grants.Evidence
	if verify != nil {
		evidence = &grants.Evidence{Request: s.requestID, Digest: x.digest, Action: r.Action, Content: content, Signature: sig}
	}
	if rec := x.esc.RecordApproval; rec != nil {
		// Recorded before it counts: after a restart it counts again,
		// and a replay of this answer is "already answered".
		ra := state.Approval{Approver: s.approver, Content: content, SignatureVerified: verify != nil, At: x.e.cfg.Now().UTC()}
		if evidence != nil {
			ra.Request, ra.Signature = evidence.Request, evidence.Signature
		}
		if err := rec(ra); err != nil {
			x.storeErr = err
			x.emit(ev)
			x.log.Error("approval not recorded in the pending-work store; not counted", "approver", s.approver, "err", err)
			return x.settle()
		}
	}
	x.approvals = append(x.approvals, approved{approver: s.approver, key: callKey, params: params, content: content, evidence: evidence})
	x.log.Info("approval received", "approver", s.approver, "edited", params != nil)
	x.emit(ev)
	return x.settle()
}

// delegate hands s on to another approver, deadline unchanged.
func (x *escalation) delegate(s *seat, to string) (fulfill.Verdict, bool) {
	if !slices.Contains(s.delegates, to) || !slices.Contains(x.delegatesFor(s.approver, s.chain), to) {
		x.lastErr = fmt.Sprintf("%s handed the request to %s, who cannot take it", s.approver, to)
		x.log.Warn("delegation refused; the approver's answer counts as no answer", "approver", s.approver, "to", to, "offered", s.delegates)
		x.emit(Event{Kind: EventIgnored, ProposalID: x.id, Approver: s.approver, From: s.approver, RequestID: s.requestID, Reason: "delegate_to " + to + " was not offered"})
		return x.settle()
	}
	x.log.Info("approver delegated", "approver", s.approver, "to", to)
	x.emit(Event{Kind: EventDelegated, ProposalID: x.id, Approver: s.approver, RequestID: s.requestID, To: to})
	x.ask(x.newSeat(to, append(slices.Clone(s.chain), s.approver)))
	return x.settle()
}

// settle decides whether the escalation is over: a quorum of distinct
// approvers approved the same call, or no such quorum can come any more.
func (x *escalation) settle() (fulfill.Verdict, bool) {
	if x.storeErr != nil {
		return fulfill.Verdict{Reason: "other", Message: "the pending-work store cannot record this approval request; propose again later"}, true
	}
	var keys []string
	groups := map[string][]approved{}
	approved := map[string]bool{}
	for _, a := range x.approvals {
		if approved[a.approver] {
			continue // one approver counts once
		}
		approved[a.approver] = true
		if _, ok := groups[a.key]; !ok {
			keys = append(keys, a.key)
		}
		groups[a.key] = append(groups[a.key], a)
	}
	best := 0
	for _, k := range keys {
		g := groups[k]
		if len(g) >= x.quorum {
			by := make([]string, len(g))
			for i, a := range g {
				by[i] = a.approver
			}
			last := g[len(g)-1]
			v := fulfill.Verdict{Approved: true, By: by, Params: last.params, Content: last.content}
			if x.quorum == 1 { // checked against the offer when it was answered
				v.Grant, _ = time.ParseDuration(readForm(last.content).grant)
				v.Evidence = last.evidence
			}
			return v, true
		}
		best = max(best, len(g))
	}
	pending := map[string]bool{}
	for _, s := range x.order {
		if s.open && !approved[s.approver] {
			pending[s.approver] = true
		}
	}
	// Tiers still to come can bring the quorum too: the escalation waits
	// for them rather than giving up before they are asked.
	for _, st := range x.plan {
		if st.tier == nil {
			continue
		}
		for _, a := range st.tier.Approvers {
			if a != x.esc.Proposal.From && !approved[a] && !x.answered[a] {
				pending[a] = true
			}
		}
	}
	if best+len(pending) >= x.quorum {
		return fulfill.Verdict{}, false
	}
	by := slices.Sorted(func(yield func(string) bool) {
		for a := range approved {
			if !yield(a) {
				return
			}
		}
	})
	if len(keys) > 1 {
		return fulfill.Verdict{Reason: "disagree", By: by, Message: "the approvers approved different edits of the call"}, true
	}
	msg := fmt.Sprintf("%s needed, but only %d can still come", approvals(x.quorum), best+len(pending))
	if x.lastErr != "" {
		msg += ": " + x.lastErr
	}
	return fulfill.Verdict{Reason: "incapable", By: by, Message: msg}, true
}

func (x *escalation) timedOut() fulfill.Verdict {
	var waiting []string
	for _, s := range x.order {
		if s.open && !slices.Contains(waiting, s.approver) {
			waiting = append(waiting, s.approver)
		}
	}
	// The decision's own timeout when it set one; else the wait as it was
	// (--approval-timeout), which started a moment before we did.
	d := x.esc.Decision.Timeout
	if d <= 0 {
		if d = x.esc.Deadline.Sub(x.started); d >= time.Second {
			d = d.Round(time.Second)
		} else {
			d = d.Round(10 * time.Millisecond)
		}
	}
	msg := fmt.Sprintf("no approval within %s", d)
	if len(waiting) > 0 {
		msg += " (no answer from " + strings.Join(waiting, ", ") + ")"
	}
	return fulfill.Verdict{Reason: "timeout", Message: msg}
}

// cancelOpen tells every approver still asked that the prompt is no longer
// needed: one notifications/cancelled per elicitation request.
func (x *escalation) cancelOpen(reason string) {
	for _, s := range x.order {
		if !s.open {
			continue
		}
		s.open = false
		if reason == fulfill.DropReason {
			continue // the prompt is another member's now: not a word
		}
		params := object{{"requestId", s.rpcID}, {"reason", reason}}
		payload := object{{"jsonrpc", "2.0"}, {"method", agent.MethodCancelled}, {"params", params}}
		env := agent.Envelope{To: []string{s.approver}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{s.requestID}, Payload: mustMarshal(payload)}
		if err := x.e.sendCancellation(env); err != nil {
			x.log.Warn("cancellation of a prompt not sent", "approver", s.approver, "request", s.requestID, "err", err)
			continue
		}
		x.emit(Event{Kind: EventCancelled, ProposalID: x.id, Approver: s.approver, RequestID: s.requestID, Reason: reason})
	}
}
