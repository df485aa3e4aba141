package state

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// Phase is where a pending proposal is in its journey. It is the
// lifecycle core's one phase enum (fulfill/lifecycle), which the record
// carries as it is: there is no second enum to map to and from.
type Phase = lifecycle.Phase

// Phases of a pending proposal.
const (
	Deciding         = lifecycle.Deciding         // claimed, policy not yet settled
	AwaitingApproval = lifecycle.AwaitingApproval // human prompts are open
	Queued           = lifecycle.Queued           // waiting for a fulfilment slot
	Fulfilling       = lifecycle.Fulfilling       // request written, response awaited
	// Running: the tool owner answered a task-augmented request with a
	// task (Task says which); it is followed to its end, and its result
	// relayed to the proposer.
	Running = lifecycle.Task
	// Answered: its reject is about to be written (Reject says which);
	// whoever resumes the record sends that reject again, never anything
	// else, and ends the record.
	Answered = lifecycle.Answered
)

// Pending is one unanswered proposal as stored. Times are absolute (UTC) so
// that a restart or an adopter keeps the original deadlines.
type Pending struct {
	ProposalID string          `json:"proposal_id"`
	Envelope   json.RawMessage `json:"envelope"` // the proposal as received
	Proposer   string          `json:"proposer"`
	Received   time.Time       `json:"received"`
	Size       int             `json:"size"` // bytes of the proposal frame

	Decision   json.RawMessage `json:"decision,omitempty"` // the policy's decision
	DecisionID string          `json:"decision_id,omitempty"`
	Revision   string          `json:"revision,omitempty"` // policy revision that decided

	Phase Phase  `json:"phase"`
	Owner string `json:"owner"` // member deciding and answering it
	// Claim is the decision id the record was claimed with (ClaimRecord):
	// the id the proposal's seen key holds, so that a replay's ignored
	// line joins the decision that governs it (docs/design.md rule 10).
	// It never changes (DecisionID does when an edit is decided again).
	// Empty in records written after a separate claim (older fulfillers).
	Claim string `json:"claim,omitempty"`

	ApprovalDeadline time.Time `json:"approval_deadline,omitzero"`
	FulfilDeadline   time.Time `json:"fulfil_deadline,omitzero"`
	// Deadline is the lifecycle core's one deadline of the current phase
	// (lifecycle.Proposal.Deadline): the pending TTL while deciding or
	// queued, the approval deadline, the fulfil timeout, the task's. The
	// core's writes set it, and ApprovalDeadline or FulfilDeadline as well
	// in their phases, for fulfillers that read only those; records
	// written before it have none (fulfill's recordStore reads them).
	Deadline time.Time `json:"deadline,omitzero"`
	// Addressee is the participant the proposal's `to` named as the
	// call's target ("" when none), as the member that read it resolved
	// it: who is in the space then is not in the record otherwise.
	Addressee string `json:"addressee,omitempty"`

	Prompts   []Prompt   `json:"prompts,omitempty"`
	Approvals []Approval `json:"approvals,omitempty"`
	// Escalation is the rest of the humans' escalation (whom it asks so
	// far, when its reminders and tiers count from, the steps done).
	Escalation *Escalation `json:"escalation,omitempty"`
	// Request is the fulfilment request, recorded before it is sent. Once
	// set it is never cleared or changed (Update refuses): whoever resumes
	// the proposal awaits its response and never sends it again.
	Request *Request `json:"request,omitempty"`
	// Task is the MCP task the tool owner made of the request, once it
	// answered with one (phase Running).
	Task *Task `json:"task,omitempty"`
	// Reject is the answer of a record in phase Answered.
	Reject *Reject `json:"reject,omitempty"`
	// Relay is the other answer a record in phase Answered can have: the
	// outcome of a task-augmented request, relayed to the proposer with
	// these ids again by whoever resumes the record.
	Relay *Relay `json:"relay,omitempty"`

	// StoreRevision is the record's revision in the store, set by every
	// read and write; Update and Delete compare against it.
	StoreRevision uint64 `json:"-"`
}

// Reject is the mcp/reject that ends a proposal, recorded before it is
// written so that a crash between the two cannot leave the proposer
// without its answer: the same envelope (same id) is sent again. It is
// the lifecycle's own type, persisted as it is: envelope_id, reason and
// message (the chat that explains it), and whether the fulfilment request
// or the task is cancelled at its owner before the reject is sent.
type Reject = lifecycle.RejectRecord

// Relay is a committed relay of a task-augmented request's outcome (see
// Pending.Relay): the lifecycle's own type, persisted as it is.
type Relay = lifecycle.RelayRecord

// Prompt is one elicitation sent to one approver: the lifecycle's own
// type, persisted as it is.
type Prompt = lifecycle.Prompt

// Approval is one approver's answer counted so far: the lifecycle's own
// type, persisted as it is.
type Approval = lifecycle.Approval

// Escalation is an escalation's state beyond its prompts and approvals:
// the lifecycle's own type, persisted as it is.
type Escalation = lifecycle.Escalation

// Request is a fulfilment request written to a tool owner: the
// lifecycle's own type, persisted as it is. Once recorded it is never
// cleared or changed (Update refuses): whoever resumes the proposal
// awaits its response and never sends it again.
type Request = lifecycle.Request

// Task is an MCP task (spec 2025-11-25, or the tasks extension of
// 2026-07-28) that a fulfilment request became at its tool owner.
type Task struct {
	ID       string    `json:"id"`               // the owner's taskId
	Spec     string    `json:"spec"`             // which revision's messages the owner speaks
	Status   string    `json:"status"`           // last status seen (working, input_required, …)
	Created  time.Time `json:"created"`          // when the owner's answer came
	Deadline time.Time `json:"deadline"`         // cancelled and rejected "timeout" after this
	Poll     int64     `json:"poll_ms,omitzero"` // the owner's suggested poll interval
}

// Put stores a new pending record (create-if-absent: ErrExists when the
// proposal already has one) and sets p.StoreRevision.
func (s *Store) Put(ctx context.Context, p *Pending) (err error) {
	defer s.timed("put", time.Now(), &err)
	if !utf8.ValidString(p.ProposalID) {
		// JSON would store it altered, and the record would lose its key.
		// Ids decoded from the wire are always valid UTF-8.
		return fmt.Errorf("state: put: proposal id %q is not valid UTF-8", truncate(p.ProposalID))
	}
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("state: encode record %q: %w", truncate(p.ProposalID), err)
	}
	rev, err := s.records.create(ctx, key(p.ProposalID), val)
	if err != nil {
		if isWrongLastSeq(err) {
			return ErrExists
		}
		return fmt.Errorf("state: put %q: %w", truncate(p.ProposalID), err)
	}
	p.StoreRevision = rev
	s.remember(p)
	// Not synced: nothing goes out on the strength of a new record alone;
	// the synced write that precedes a prompt or request about it takes
	// it to disk too, and a reject needs no sync (docs/design.md).
	return nil
}

// Get returns the record of proposalID, or ErrNotFound.
func (s *Store) Get(ctx context.Context, proposalID string) (p *Pending, err error) {
	defer s.timed("get", time.Now(), &err)
	e, err := s.records.get(ctx, key(proposalID))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("state: get %q: %w", truncate(proposalID), err)
	}
	p, err = decodePending(e)
	if err == nil {
		s.remember(p)
	}
	return p, err
}

// Update replaces the record if it is still at p.StoreRevision, and sets
// p.StoreRevision to the new revision. ErrConflict when it changed (another
// member adopted it, or a concurrent update won): reload and decide again.
// ErrRequestRewritten when p would clear or change a Request already
// written.
func (s *Store) Update(ctx context.Context, p *Pending) (err error) {
	defer s.timed("update", time.Now(), &err)
	failed := s.expectSync()
	if err := s.update(ctx, p); err != nil {
		failed()
		return err
	}
	return s.syncedExpected(ctx)
}

// UpdateSoon is Update without the wait for the sync: when it returns the
// write is in the kernel (it survives the process), and a sync follows
// within lazySync, as after Delete. It is for a step that nothing sent
// depends on (docs/design.md syncs before a prompt or a fulfilment request
// goes out): an escalation's phase, whose first prompt's record is synced
// before that prompt is sent, and an approval, which a machine crash can
// lose only for the approver's client to answer again when its prompt is
// re-asked (same ids) after the restart. So the path from an approval to
// its fulfilment request waits for one sync, the request's.
func (s *Store) UpdateSoon(ctx context.Context, p *Pending) (err error) {
	defer s.timed("update_soon", time.Now(), &err)
	if err := s.update(ctx, p); err != nil {
		return err
	}
	s.syncSoon()
	return nil
}

// MarkAnswered is Update for a record moving to phase Answered (p.Reject
// set), just before its reject is written; the record is deleted after.
// It does not wait for a sync: docs/design.md syncs before prompts and requests,
// and a reject is neither. A process crash keeps the write (it is in the
// kernel); a sync follows within lazySync, as after Delete.
func (s *Store) MarkAnswered(ctx context.Context, p *Pending) (err error) {
	defer s.timed("answered", time.Now(), &err)
	if p.Phase != Answered || p.Reject == nil || p.Reject.EnvelopeID == "" {
		return fmt.Errorf("state: mark %q answered: phase %q with reject %+v", truncate(p.ProposalID), p.Phase, p.Reject)
	}
	if err := s.update(ctx, p); err != nil {
		return err
	}
	s.syncSoon()
	return nil
}

// update is Update's compare-and-set without the sync.
func (s *Store) update(ctx context.Context, p *Pending) error {
	k := key(p.ProposalID)
	old, ok := s.known.Get(k)
	if !ok || old.rev != p.StoreRevision {
		// Not what this store last read or wrote: read it to check.
		cur, err := s.records.get(ctx, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return ErrConflict // finished and deleted by someone else
			}
			return fmt.Errorf("state: update %q: %w", truncate(p.ProposalID), err)
		}
		if cur.Revision() != p.StoreRevision {
			return ErrConflict
		}
		rec, err := decodePending(cur)
		if err != nil {
			return err
		}
		old = knownRecord{rev: rec.StoreRevision, request: rec.Request}
	}
	if old.request != nil && (p.Request == nil || !reflect.DeepEqual(*old.request, *p.Request)) {
		return ErrRequestRewritten
	}
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("state: encode record %q: %w", truncate(p.ProposalID), err)
	}
	rev, err := s.records.update(ctx, k, val, p.StoreRevision)
	if err != nil {
		if isWrongLastSeq(err) {
			s.known.Remove(k)
			return ErrConflict
		}
		return fmt.Errorf("state: update %q: %w", truncate(p.ProposalID), err)
	}
	p.StoreRevision = rev
	s.remember(p)
	return nil
}

// knownRecord is what this store last read or wrote of a record at a
// revision: enough for Update to refuse rewriting a fulfilment request
// without reading the record again first. The compare-and-set on the
// revision makes it exact: if the record changed since, the update fails.
type knownRecord struct {
	rev     uint64
	request *Request
}

// knownRecords bounds the cache of knownRecord: past it Update reads the
// record first, as it would without the cache.
const knownRecords = 1 << 16

func (s *Store) remember(p *Pending) {
	var req *Request
	if p.Request != nil {
		r := *p.Request
		req = &r
	}
	s.known.Add(key(p.ProposalID), knownRecord{rev: p.StoreRevision, request: req})
}

// Delete removes the record when its proposal has ended, if it is still at
// p.StoreRevision (else ErrConflict: someone else now owns it).
func (s *Store) Delete(ctx context.Context, p *Pending) (err error) {
	defer s.timed("delete", time.Now(), &err)
	k := key(p.ProposalID)
	if s.seenLog != nil {
		// The record kept rule 5 while it lived; its seen entry does
		// from now on, so it must be in the log first.
		if err := s.seenLog.flushed(ctx, k); err != nil {
			return fmt.Errorf("state: delete %q: %w", truncate(p.ProposalID), err)
		}
	}
	s.known.Remove(k)
	err = s.records.remove(ctx, k, p.StoreRevision)
	if err != nil {
		if isWrongLastSeq(err) {
			return ErrConflict
		}
		return fmt.Errorf("state: delete %q: %w", truncate(p.ProposalID), err)
	}
	// Not waited for: nothing that goes out depends on the end of a
	// record being on disk (docs/design.md syncs writes before a prompt or a
	// fulfilment request). A delete lost with the machine within
	// lazySync resumes an ended proposal after the restart, which can
	// answer it a second time (docs/state.md); a process crash loses
	// nothing (the write is in the kernel).
	s.syncSoon()
	return nil
}

// List returns every pending record of the group (all members), for the
// operator API and recovery. In a group it reads every key written within
// the delete markers' lifetime (see snapshot): not for a hot path. Alone
// it copies the record log's memory.
func (s *Store) List(ctx context.Context) (ps []*Pending, err error) {
	defer s.timed("list", time.Now(), &err)
	entries, err := s.records.all(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: list pending: %w", err)
	}
	for _, e := range entries {
		p, err := decodePending(e)
		if err != nil {
			s.log.Error("skipping unreadable pending record", "key", e.Key(), "err", err)
			continue
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Owned returns this member's pending records: what to resume after a
// restart on the same store.
func (s *Store) Owned(ctx context.Context) ([]*Pending, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	var mine []*Pending
	for _, p := range all {
		if p.Owner == s.cfg.Member {
			mine = append(mine, p)
		}
	}
	return mine, nil
}

func decodePending(e jetstream.KeyValueEntry) (*Pending, error) {
	var p Pending
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, fmt.Errorf("state: decode record %s: %w", e.Key(), err)
	}
	p.StoreRevision = e.Revision()
	return &p, nil
}

// snapshot reads the current value of every live key in a bucket, as the
// bucket's stream leader has it, in the order the values were written.
//
// Not through a watcher: a watcher's consumer is placed on any replica of
// the stream (nats-server's createGroupForConsumer picks an R1 consumer's
// peer at random), and a follower may not yet have applied a write the
// leader acknowledged. Such a snapshot missed a lease just written
// (Members = [A] with A, B and C live) and returned a record's previous
// revision and owner (TestReadsAreCurrent). Callers decide adoption,
// recovery and what the operator sees on it, so it reads what the leader
// has: the keys from its stream info, then each key's last value by a
// get, which the leader answers (direct gets are off, see leaderReads).
func (s *Store) snapshot(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, error) {
	entries, _, err := s.snapshotAt(ctx, kv)
	return entries, err
}

// snapshotAt is snapshot that also returns the leader's last stream
// sequence before the reads: every write after it has a greater revision,
// so a watch that resumes from the revision after it misses nothing the
// snapshot did not see (WatchGrants).
func (s *Store) snapshotAt(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		// An unreachable store would otherwise be waited on forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultOpTimeout)
		defer cancel()
	}
	st, err := s.js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return nil, 0, err
	}
	prefix := "$KV." + kv.Bucket() + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, 0, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, prefix))
	}
	// One get per key, a few at a time: on an external cluster each is a
	// round trip to the leader.
	entries := make([]jetstream.KeyValueEntry, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, snapshotReaders)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			e, err := kv.Get(ctx, k)
			switch {
			case err == nil:
				entries[i] = e
			case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
				// Only a delete or purge marker left, or removed since
				// the stream info: not a live key.
			default:
				errs[i] = fmt.Errorf("get %q: %w", truncate(k), err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	out := entries[:0]
	for _, e := range entries {
		if e != nil {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(x, y jetstream.KeyValueEntry) int { return cmp.Compare(x.Revision(), y.Revision()) })
	return out, info.State.LastSeq, nil
}

// snapshotReaders bounds a snapshot's concurrent gets.
const snapshotReaders = 16
