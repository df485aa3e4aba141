package state

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"
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
	c := claim{Member: s.cfg.Member, At: time.Now().UTC(), Nonce: rand.Text(), Decision: decisionID}
	val, err := json.Marshal(c)
	if err != nil {
		return false, "", fmt.Errorf("state: claim: %w", err)
	}
	k := key(proposalID)
	_, err = s.seen.Create(ctx, k, val)
	switch {
	case err == nil:
		s.obs.Claimed(true)
		return true, decisionID, nil
	case isWrongLastSeq(err):
		s.obs.Claimed(false)
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
			won := got.Nonce == c.Nonce
			s.obs.Claimed(won)
			return won, got.Decision, nil
		}
	}
	return false, "", fmt.Errorf("state: claim %q: %w", truncate(proposalID), err)
}

// truncate keeps hostile ids from flooding error messages and logs.
func truncate(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}
