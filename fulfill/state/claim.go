package state

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// claim is the value of a seen key: who claimed the proposal, when, and a
// nonce that lets Claim recognise its own write when the ack was lost.
type claim struct {
	Member string    `json:"member"`
	At     time.Time `json:"at"`
	Nonce  string    `json:"nonce"`
	// Decision is the id of the decision that governs the proposal (the
	// winner mints it before its policy runs, and the first decision
	// adopts it): a replay, or a peer, that loses the claim logs its
	// ignored line under it (docs/design.md rule 10).
	Decision string `json:"decision,omitempty"`
}

// Claim marks proposalID seen and reports whether this member is the one
// that owns it (rule 5 and groups). It is an atomic create-if-absent in the
// seen bucket: among all members of the group, and across restarts, exactly
// one call wins per id within SeenTTL of the winning claim; every other call
// (a replay, a peer's claim) returns false and must send nothing. After
// SeenTTL the id is claimable again: SeenTTL is the window of rule 5.
//
// An error means the outcome is unknown; the caller must not act on the
// proposal (fail closed).
func (s *Store) Claim(ctx context.Context, proposalID string) (won bool, err error) {
	won, _, err = s.ClaimDecision(ctx, proposalID, "")
	return won, err
}

// ClaimDecision is Claim that records decisionID with the claim. A lost
// claim returns the decision id the winning claim recorded (winner; ""
// when it recorded none or the claim could not be read back, e.g. it
// expired meanwhile), so that the loser's line joins the decision that
// governs the proposal.
func (s *Store) ClaimDecision(ctx context.Context, proposalID, decisionID string) (won bool, winner string, err error) {
	defer s.timed("claim", time.Now(), &err)
	won, winner, err = s.claimSeen(ctx, proposalID, decisionID)
	if err == nil {
		s.obs.Claimed(won)
	}
	return won, winner, err
}

// claimSeen is ClaimDecision's create-if-absent in the seen bucket (a
// store alone: its seen log, waiting for the entry to be written),
// without its measurements.
func (s *Store) claimSeen(ctx context.Context, proposalID, decisionID string) (won bool, winner string, err error) {
	if s.seenLog != nil {
		return s.seenLog.claim(ctx, key(proposalID), decisionID, true)
	}
	c := claim{Member: s.cfg.Member, At: time.Now().UTC(), Nonce: rand.Text(), Decision: decisionID}
	val, err := json.Marshal(c)
	if err != nil {
		return false, "", fmt.Errorf("state: claim: %w", err)
	}
	k := key(proposalID)
	_, err = s.seen.Create(ctx, k, val)
	switch {
	case err == nil:
		return true, decisionID, nil
	case isWrongLastSeq(err):
		// Only a replay or a peer's claim pays for this read.
		if e, gerr := s.seen.Get(ctx, k); gerr == nil {
			var got claim
			if json.Unmarshal(e.Value(), &got) == nil {
				winner = got.Decision
			}
		}
		return false, winner, nil
	}
	// The create may have been applied even though its ack was lost
	// (timeout, reconnect). Look: if the key holds our nonce, it is ours.
	if e, gerr := s.seen.Get(ctx, k); gerr == nil {
		var got claim
		if json.Unmarshal(e.Value(), &got) == nil {
			return got.Nonce == c.Nonce, got.Decision, nil
		}
	}
	return false, "", fmt.Errorf("state: claim %q: %w", truncate(proposalID), err)
}

// ClaimRecord is the claim and the record in one write: a create-if-absent
// of p's pending record (phase as the caller sets it, Owner this member,
// Claim the decision id the claim records), so that a claimed proposal
// always has a record that a restart or an adopter resumes. A crash after
// a separate claim (seen bucket) and before the record (pending bucket)
// left a proposal claimed that nobody answered, and whose replay was
// ignored as a duplicate.
//
// The record ends when its proposal does, but rule 5 holds for SeenTTL:
// once the record is written, the proposal's seen key is written too
// (ClaimDecision's create-if-absent, with p.Claim), and it decides. Among
// the group, exactly one call wins per id within SeenTTL:
//
//   - the record exists (a peer's claim, or a replay while pending): lost,
//     nothing written; winner is the record's claim;
//   - the record was created but the seen key holds another claim (a
//     replay of an ended proposal, or a peer's claim without a record,
//     see ClaimDecision): the record is deleted again and the claim lost;
//   - the seen key holds p.Claim (this member's claim, resumed): won.
//
// A crash between the two writes leaves a record whose seen key may be
// missing: Reclaim writes it before the record is acted on again.
//
// Alone on the store the seen ids are in memory and a log (seenLog): an
// id seen with another claim is lost before anything is written, and the
// won id's entry is written in the background; Delete waits for it before
// the record ends, which is when the entry starts to matter.
//
// An error means the outcome is unknown and nothing may be sent about the
// proposal (fail closed); the record is deleted if it was written. If it
// cannot be, the error is ErrRecordLeft: a restart or an adopter resumes
// the record (Reclaim settles it first) and answers the proposal.
//
// A record may be claimed in the phase its decision leads to (a member
// alone on its store decides first, see lifecycle.Config.Alone): one
// that carries a fulfilment request or prompts is synced before a win
// returns, as Update is, since they go out once it returns; any other
// (deciding, queued, its reject) is not, as Put is not.
func (s *Store) ClaimRecord(ctx context.Context, p *lifecycle.Proposal) (won bool, winner string, err error) {
	defer s.timed("claim", time.Now(), &err)
	if p.Request == nil && len(p.Prompts) == 0 {
		return s.claimRecord(ctx, p)
	}
	failed := s.expectSync()
	won, winner, err = s.claimRecord(ctx, p)
	if err != nil || !won {
		failed()
		return won, winner, err
	}
	if err := s.syncedExpected(ctx); err != nil {
		// Claimed, not known to be on disk: the caller retries, and
		// the claim is found to be its own (ClaimRecord again, won).
		return false, "", err
	}
	return true, winner, nil
}

// claimRecord is ClaimRecord without its sync and measurement.
func (s *Store) claimRecord(ctx context.Context, p *lifecycle.Proposal) (won bool, winner string, err error) {
	if !utf8.ValidString(p.ID) {
		return false, "", fmt.Errorf("state: claim: proposal id %q is not valid UTF-8", truncate(p.ID))
	}
	if p.Claim == "" {
		return false, "", fmt.Errorf("state: claim %q: no decision id", truncate(p.ID))
	}
	p.Owner = s.cfg.Member
	val, err := encodeRecord(p)
	if err != nil {
		return false, "", err
	}
	k := key(p.ID)
	if s.seenLog != nil {
		// Alone: seen is known here, without a round trip. An id seen
		// with this very claim is a retry of ours: its record says.
		seen, winner, err := s.seenLog.peek(ctx, k)
		if err != nil {
			return false, "", err
		}
		if seen && winner != p.Claim {
			s.obs.Claimed(false)
			return false, winner, nil
		}
	}
	rev, err := s.records.create(ctx, k, val)
	if err != nil {
		// A create refused (the record exists), or one whose ack was lost
		// (timeout, reconnect): the record says whose claim it is.
		e, gerr := s.records.get(ctx, k)
		if gerr != nil {
			if isWrongLastSeq(err) && errors.Is(gerr, jetstream.ErrKeyNotFound) {
				// Ended between the create and the get: a replay.
				s.obs.Claimed(false)
				return false, "", nil
			}
			return false, "", fmt.Errorf("state: claim %q: %w", truncate(p.ID), errors.Join(err, gerr))
		}
		got, derr := decodeRecord(e)
		if derr != nil {
			return false, "", fmt.Errorf("state: claim %q: %w", truncate(p.ID), errors.Join(err, derr))
		}
		if got.Owner != s.cfg.Member || got.Claim != p.Claim {
			s.obs.Claimed(false)
			return false, claimOf(got), nil
		}
		rev = e.Revision() // our own create, applied
	}
	p.Rev = rev
	s.remember(p)
	var seenWon bool
	var seenWinner string
	if s.seenLog != nil {
		// The record refuses a replay while it lives, and a restart
		// claims its id again (Reclaim): its seen entry need be in the
		// log only before the record ends (Delete waits for it).
		seenWon, seenWinner, err = s.seenLog.claim(ctx, k, p.Claim, false)
	} else {
		seenWon, seenWinner, err = s.claimSeen(ctx, p.ID, p.Claim)
	}
	switch {
	case err != nil:
		if uerr := s.undoClaim(ctx, p); uerr != nil {
			return false, "", fmt.Errorf("%w: %w", ErrRecordLeft, errors.Join(err, uerr))
		}
		return false, "", err
	case !seenWon && seenWinner != p.Claim:
		// Left if the purge fails: a restart's Reclaim drops it.
		_ = s.undoClaim(ctx, p)
		s.obs.Claimed(false)
		return false, seenWinner, nil
	}
	s.obs.Claimed(true)
	return true, p.Claim, nil
}

// claimOf is the decision id a record's claim recorded (its decision's for
// a record written by an older fulfiller).
func claimOf(p *lifecycle.Proposal) string {
	if p.Claim != "" {
		return p.Claim
	}
	return p.DecisionID
}

// ErrRecordLeft: ClaimRecord could not tell whether it won (its seen key
// failed) and could not delete the record it wrote either. The record is
// resumed after a restart or by an adopter, which answers the proposal:
// the caller must send nothing about it now, not even "busy", or the
// proposer could get two answers.
var ErrRecordLeft = errors.New("state: claim undecided, its record left for whoever resumes it")

// undoClaim deletes a record ClaimRecord wrote but did not win. If it
// cannot, the record is resumed after a restart or by an adopter, and
// Reclaim settles whose it is.
func (s *Store) undoClaim(ctx context.Context, p *lifecycle.Proposal) error {
	k := key(p.ID)
	s.known.Remove(k)
	if err := s.records.remove(ctx, k, p.Rev); err != nil {
		s.log.Error("record of a claim not won left in the store; whoever resumes it settles it", "proposal", truncate(p.ID), "err", err)
		return err
	}
	s.syncSoon()
	return nil
}

// Reclaim settles the seen key of a record about to be resumed (restart,
// adoption, an operator's take): a crash between ClaimRecord's two writes
// leaves the record without it. It writes the key if it is missing (or
// expired, for a proposal pending longer than SeenTTL) and reports whether
// the record's claim holds it. false: another claim holds the id (the
// record was a replay of an ended proposal, written just before a crash):
// the caller deletes the record and sends nothing. Records written after a
// separate claim (p.Claim empty) are always theirs.
func (s *Store) Reclaim(ctx context.Context, p *lifecycle.Proposal) (ours bool, err error) {
	defer s.timed("reclaim", time.Now(), &err)
	if p.Claim == "" {
		return true, nil
	}
	won, winner, err := s.claimSeen(ctx, p.ID, p.Claim)
	if err != nil {
		return false, err
	}
	return won || winner == p.Claim, nil
}

// truncate keeps hostile ids from flooding error messages and logs.
func truncate(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}
