package fulfill

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// journal is the core's decision log (lifecycle.Journal) over the
// Observer: each lifecycle.Line becomes the Event the observers have
// always had. The lines of answers are written ahead (Recorder.Record)
// and told to the observers that only watch once the envelope is written
// (written), as the answer itself: an answer that never left is never
// reported as sent.
type journal struct {
	obs Observer
	log *slog.Logger
	// peers are the fellow fulfillers (--peer-fulfillers): a proposal
	// they supersede is the expected division of work.
	peers []string
	// records: some observer is a Recorder, whose Record may wait.
	records bool
	// frontEnd is the engine's front end: every line is of its proposals.
	frontEnd string

	mu sync.Mutex
	// ahead are the lines written ahead whose envelope is not written
	// yet, by proposal; recent what the last line of each recent
	// proposal said of it (not safe for concurrent use: under mu),
	// for the events the wire reports later (a refused reject).
	ahead  map[string]Event
	recent *simplelru.LRU[string, recentLine]
	// From Closing on, the rejects owed (by proposal) and which of them
	// were written: what shutdown reports (ShutdownAnswers).
	closing bool
	owed    map[string]bool // proposal → written
	// tried are the proposals whose answer was tried since Closing
	// (written, or not written): shutdown waits for nothing more of them.
	tried map[string]bool
	// resent are the proposals resumed with their answer recorded
	// (phase answered): the reject that follows is one sent again.
	resent map[string]bool
	// waiters are told the next line of their proposal that matches
	// (an operator's cancel waits for its reject to be committed).
	waiters map[string][]lineWaiter
}

type lineWaiter struct {
	match func(Event) bool
	ch    chan Event // capacity 1
}

// recentLines bounds journal.recent: the gateway refuses a frame within
// one round trip of its write.
const recentLines = 4096

// recentLine is what journal.recent keeps of a proposal's last line: what
// an undelivered answer's event and the wire's request read of it (every
// line is kept, so a whole Event was a copy of 350 bytes per line).
type recentLine struct {
	decisionID, revision, proposer, method, tool, target string
	fields                                               *lifecycle.LogFields
}

func newJournal(obs Observer, log *slog.Logger) *journal {
	recent, _ := simplelru.NewLRU[string, recentLine](recentLines, nil)
	return &journal{obs: obs, log: log, records: hasRecorder(obs), ahead: map[string]Event{}, recent: recent, owed: map[string]bool{}, tried: map[string]bool{}, resent: map[string]bool{}, waiters: map[string][]lineWaiter{}}
}

// Immediate implements lifecycle.Immediate: with no Recorder among the
// observers a line is only observed, and returns at once as Observe must
// (Observer), so the core's loop writes it itself. With one (the
// decision log), every line stays on a worker: the log's Observe waits
// once its backlog is full (a slow disk slows the fulfiller down), and
// that wait must hold up the proposal's lane, never the loop's timers,
// withdrawals and answers.
func (j *journal) Immediate(e lifecycle.Effect) bool {
	_, ok := e.(lifecycle.Log)
	return ok && !j.records
}

// hasRecorder reports whether obs writes lines ahead (a Recorder, or
// Observers holding one).
func hasRecorder(obs Observer) bool {
	if os, ok := obs.(Observers); ok {
		for _, o := range os {
			if hasRecorder(o) {
				return true
			}
		}
		return false
	}
	_, ok := obs.(Recorder)
	return ok
}

// writtenAhead are the stages whose line is written ahead of the
// envelope that carries them out.
func writtenAhead(s Stage) bool {
	return s == StageRejected || s == StageFulfilling || s == StageEscalated
}

// Log implements lifecycle.Journal. It returns the Recorder's error for
// a line written ahead of a send (fulfilling, escalated): the core then
// fails closed (lifecycle.Unlogged): nothing is sent that the decision
// log does not have.
func (j *journal) Log(_ context.Context, l lifecycle.Line) error {
	if l.Stage == string(StageDecided) {
		// The policy step's record of the decision, with its input and
		// latency (the core's line only repeats the action), told now
		// that the decision governs the proposal.
		if n, ok := l.Note.(*decidedNote); ok {
			n.log()
		}
		return nil
	}
	ev := eventOf(l)
	ev.FrontEnd = j.frontEnd
	stamp(&ev)
	j.logFor(ev)
	if ev.Stage == StageSuperseded && len(ev.By) > 0 {
		ev.KnownFulfiller = slices.Contains(j.peers, ev.By[0])
		if !ev.KnownFulfiller {
			j.log.Warn("a proposal was ended by a participant that is not a known fulfiller; nobody waits for our answer any more",
				"proposal", ev.ProposalID, "by", ev.By[0], "how", ev.Message)
		}
	}
	j.mu.Lock()
	j.recent.Add(ev.ProposalID, recentLine{ev.DecisionID, ev.Revision, ev.Proposer, ev.Method, ev.Tool, ev.Target, ev.LogFields})
	j.notifyLocked(ev)
	if ev.Stage == StageRejected && j.closing {
		if _, ok := j.owed[ev.ProposalID]; !ok {
			j.owed[ev.ProposalID] = false
		}
	}
	j.mu.Unlock()
	if !writtenAhead(ev.Stage) {
		j.obs.Observe(ev)
		return nil
	}
	if r, ok := j.obs.(Recorder); ok {
		if err := r.Record(ev); err != nil {
			j.log.Error("decision log line not written", "proposal", ev.ProposalID, "stage", ev.Stage, "err", err)
			if l.Ahead {
				// Nothing it is ahead of is sent (a rejected line is
				// only logged: the reject still goes).
				return fmt.Errorf("decision log: %s line of proposal %s: %w", ev.Stage, ev.ProposalID, err)
			}
		}
	}
	if ev.Stage == StageEscalated {
		j.announce(ev) // the prompts' own sends are the approvers' channel's
		return nil
	}
	j.mu.Lock()
	j.ahead[ev.ProposalID] = ev
	j.mu.Unlock()
	return nil
}

// written: the envelope that carries out proposal id's line written
// ahead went out; the observers that only watch hear of it now.
func (j *journal) written(proposalID, envelopeID string) {
	j.mu.Lock()
	ev, ok := j.ahead[proposalID]
	delete(j.ahead, proposalID)
	if _, owed := j.owed[proposalID]; owed && ev.Stage == StageRejected {
		j.owed[proposalID] = true
	}
	if j.closing {
		j.tried[proposalID] = true
	}
	j.mu.Unlock()
	if ok {
		j.announce(ev)
	}
}

// undelivered: an answer of proposal id (kind: mcp/reject or the
// fulfilment mcp/request) was not written, or the gateway refused it.
func (j *journal) undelivered(proposalID, kind, reason, detail string) {
	j.mu.Lock()
	ev, ok := j.ahead[proposalID]
	delete(j.ahead, proposalID)
	if j.closing {
		j.tried[proposalID] = true
	}
	if !ok {
		var r recentLine
		if r, ok = j.recent.Peek(proposalID); ok {
			ev = Event{DecisionID: r.decisionID, Revision: r.revision, Proposer: r.proposer, Method: r.method, Tool: r.tool, Target: r.target, LogFields: r.fields}
		}
	}
	j.mu.Unlock()
	if !ok {
		ev = Event{ProposalID: proposalID}
	}
	ev = Event{Stage: StageUndelivered, FrontEnd: j.frontEnd, ProposalID: proposalID, DecisionID: ev.DecisionID, Revision: ev.Revision,
		Proposer: ev.Proposer, Method: ev.Method, Tool: ev.Tool, Target: ev.Target, LogFields: ev.LogFields,
		Envelope: kind, Reason: reason, Message: detail}
	stamp(&ev)
	j.obs.Observe(ev)
}

// observe tells the observers of an event that is no line of the core
// (the wire's StageGranted).
func (j *journal) observe(ev Event) {
	if ev.FrontEnd == "" {
		ev.FrontEnd = j.frontEnd
	}
	stamp(&ev)
	j.obs.Observe(ev)
}

// method is proposal id's JSON-RPC method as its last line said: what the
// wire's fulfilment request carries (its fulfilling line is written just
// before it).
func (j *journal) method(id string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if ev, ok := j.ahead[id]; ok {
		return ev.Method
	}
	r, _ := j.recent.Peek(id)
	return r.method
}

func (j *journal) announce(ev Event) {
	switch o := j.obs.(type) {
	case Observers:
		o.observeWatchers(ev)
	case Recorder:
	default:
		o.Observe(ev)
	}
}

// closed starts counting the rejects owed at shutdown.
func (j *journal) closed() {
	j.mu.Lock()
	j.closing = true
	j.mu.Unlock()
}

// shutdownAnswers reports the rejects owed since Closing and how many
// were not written.
func (j *journal) shutdownAnswers() (owed, unwritten int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, written := range j.owed {
		owed++
		if !written {
			unwritten++
		}
	}
	return owed, unwritten
}

// eventOf is the Event a line reports.
func eventOf(l lifecycle.Line) Event {
	ev := Event{Stage: Stage(l.Stage), ProposalID: l.ProposalID, DecisionID: l.DecisionID, Revision: l.Revision,
		Proposer: l.Proposer, Method: l.Method, Tool: l.Tool, Target: l.Target, LogFields: l.Log,
		Reason: l.Reason, Message: l.Message, By: l.By, Result: l.Result, RPCError: l.RPCError,
		Latency: l.Latency, Deadline: l.Deadline}
	if l.TaskID != "" {
		ev.Task = &TaskInfo{ID: l.TaskID, Spec: l.TaskSpec, Status: l.TaskStatus, Created: l.TaskCreated, Deadline: l.TaskDeadline}
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	return ev
}

// await returns a channel that gets the next line of proposal id that
// match accepts, and a func that stops waiting.
func (j *journal) await(id string, match func(Event) bool) (<-chan Event, func()) {
	w := lineWaiter{match: match, ch: make(chan Event, 1)}
	j.mu.Lock()
	j.waiters[id] = append(j.waiters[id], w)
	j.mu.Unlock()
	return w.ch, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		ws := j.waiters[id]
		for i := range ws {
			if ws[i].ch == w.ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(j.waiters, id)
		} else {
			j.waiters[id] = ws
		}
	}
}

// notifyLocked hands ev to the waiters of its proposal it matches.
// Called with j.mu held.
func (j *journal) notifyLocked(ev Event) {
	if len(j.waiters) == 0 {
		return // nobody waits (an operator's cancel does): no lookup per line
	}
	ws := j.waiters[ev.ProposalID]
	kept := ws[:0]
	for _, w := range ws {
		if w.match(ev) {
			w.ch <- ev
			continue
		}
		kept = append(kept, w)
	}
	if len(kept) == 0 {
		delete(j.waiters, ev.ProposalID)
	} else {
		j.waiters[ev.ProposalID] = kept
	}
}

// storeFailed: a write of proposal id's record failed; after Closing its
// answer counts as tried (it cannot be committed, so not sent: its
// record, as the store last took it, is for the next run).
func (j *journal) storeFailed(id string) {
	j.mu.Lock()
	if j.closing {
		j.tried[id] = true
	}
	j.mu.Unlock()
}

// allTried reports whether the answer of each of ids was tried since
// Closing.
func (j *journal) allTried(ids []string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range ids {
		if !j.tried[id] {
			return false
		}
	}
	return true
}

// logFor writes the operator's log line of an event that has one (the
// decision log has them all): a replay set aside, a proposal resumed, a
// reject recorded before a restart and sent again.
func (j *journal) logFor(ev Event) {
	switch {
	case ev.Stage == StageIgnored && ev.Reason == "duplicate":
		j.log.Info("proposal claimed before (a replay, or another member of the group); ignored", "proposal", ev.ProposalID, "from", ev.Proposer)
	case ev.Stage == StageResumed:
		j.log.Info("pending proposal resumed", "proposal", ev.ProposalID, "how", ev.Message)
		if strings.HasSuffix(ev.Message, "("+string(lifecycle.Answered)+")") {
			j.mu.Lock()
			j.resent[ev.ProposalID] = true
			j.mu.Unlock()
		}
	case ev.Stage == StageRejected:
		j.mu.Lock()
		again := j.resent[ev.ProposalID]
		delete(j.resent, ev.ProposalID)
		j.mu.Unlock()
		if again {
			j.log.Info("reject recorded before the restart sent again", "proposal", ev.ProposalID, "reason", ev.Reason)
		}
	}
}
