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
	defer s.timed("claim", time.Now(), &err)
	c := claim{Member: s.cfg.Member, At: time.Now().UTC(), Nonce: rand.Text()}
	val, err := json.Marshal(c)
	if err != nil {
		return false, fmt.Errorf("state: claim: %w", err)
	}
	k := key(proposalID)
	_, err = s.seen.Create(ctx, k, val)
	switch {
	case err == nil:
		s.obs.Claimed(true)
		return true, nil
	case isWrongLastSeq(err):
		s.obs.Claimed(false)
		return false, nil
	}
	// The create may have been applied even though its ack was lost
	// (timeout, reconnect). Look: if the key holds our nonce, it is ours.
	if e, gerr := s.seen.Get(ctx, k); gerr == nil {
		var got claim
		if json.Unmarshal(e.Value(), &got) == nil {
			won := got.Nonce == c.Nonce
			s.obs.Claimed(won)
			return won, nil
		}
	}
	return false, fmt.Errorf("state: claim %q: %w", truncate(proposalID), err)
}

// truncate keeps hostile ids from flooding error messages and logs.
func truncate(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}
