package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// Answer is an answer to a proposal (an mcp/reject or the fulfilment
// mcp/request's outcome) decided but not yet known to be delivered: re-sent
// after a reconnect or restart while its proposal still matters.
type Answer struct {
	ProposalID string          `json:"proposal_id"`
	Envelope   json.RawMessage `json:"envelope"`
	Owner      string          `json:"owner"`
	Enqueued   time.Time       `json:"enqueued"`

	StoreRevision uint64 `json:"-"`
}

// Enqueue records the answer to proposalID before it is sent. At most one
// answer per proposal can be queued (rule 2): ErrExists when one is.
func (s *Store) Enqueue(ctx context.Context, proposalID string, envelope []byte) (err error) {
	defer s.timed("outbox", time.Now(), &err)
	if !utf8.ValidString(proposalID) {
		return fmt.Errorf("state: enqueue: proposal id %q is not valid UTF-8", truncate(proposalID))
	}
	a := Answer{ProposalID: proposalID, Envelope: envelope, Owner: s.cfg.Member, Enqueued: time.Now().UTC()}
	val, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("state: encode answer %q: %w", truncate(proposalID), err)
	}
	if _, err := s.outbox.Create(ctx, key(proposalID), val); err != nil {
		if isWrongLastSeq(err) {
			return ErrExists
		}
		return fmt.Errorf("state: enqueue answer %q: %w", truncate(proposalID), err)
	}
	return s.synced(ctx)
}

// Ack removes a delivered answer. Acking an answer that is not queued is
// not an error (a re-send raced with the first delivery).
func (s *Store) Ack(ctx context.Context, proposalID string) (err error) {
	defer s.timed("outbox", time.Now(), &err)
	if err := s.outbox.Purge(ctx, key(proposalID), jetstream.PurgeTTL(markerTTL)); err != nil {
		return fmt.Errorf("state: ack answer %q: %w", truncate(proposalID), err)
	}
	return s.synced(ctx) // else a restart could deliver it a second time
}

// Outbox returns this member's answers not yet acknowledged, oldest first.
func (s *Store) Outbox(ctx context.Context) (as []*Answer, err error) {
	defer s.timed("outbox", time.Now(), &err)
	entries, err := s.snapshot(ctx, s.outbox)
	if err != nil {
		return nil, fmt.Errorf("state: list outbox: %w", err)
	}
	for _, e := range entries {
		a, err := decodeAnswer(e)
		if err != nil {
			s.log.Error("skipping unreadable outbox entry", "key", e.Key(), "err", err)
			continue
		}
		if a.Owner == s.cfg.Member {
			as = append(as, a)
		}
	}
	return as, nil
}

func decodeAnswer(e jetstream.KeyValueEntry) (*Answer, error) {
	var a Answer
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return nil, fmt.Errorf("state: decode answer %s: %w", e.Key(), err)
	}
	a.StoreRevision = e.Revision()
	return &a, nil
}

// errNoEntry reports a missing or deleted key.
func errNoEntry(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}
