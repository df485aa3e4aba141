package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MemberInfo is one live member's lease as stored.
type MemberInfo struct {
	ID         string `json:"id"`
	MaxPending int    `json:"max_pending"`
	// Pending is the member's pending work when it last renewed its
	// lease (SetPending): the group's load is the sum over live members,
	// read from one record each rather than from every pending record.
	Pending int       `json:"pending"`
	Started time.Time `json:"started"`
	Renewed time.Time `json:"renewed"`
	Lease   Duration  `json:"lease"`
}

// Duration is a time.Duration that reads and writes as a Go duration string.
type Duration time.Duration

// MarshalJSON writes d as "5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

type lease struct {
	done chan struct{}
}

// StartLease registers this member in the group and keeps its lease alive
// until ctx is cancelled or the store is closed. The lease is a key in the
// members bucket with a per-key TTL of Config.Lease, rewritten every
// Lease/3. Close removes it (peers adopt at once); cancelling ctx stops
// renewing without removing it, as a crash would, and peers see it lapse
// within Lease.
//
// A lease that lapsed anyway (this process stalled, or lost the store for
// longer than Lease) is taken again at the next renewal, logged and
// reported to the Observer. Peers may have adopted this member's records
// meanwhile: the compare-and-set on every Update and Delete then fails with
// ErrConflict, which is what stops this member from acting on them.
func (s *Store) StartLease(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.lease != nil {
		return errors.New("state: lease already started")
	}
	started := time.Now().UTC()
	// Unconditional: after a restart the previous process's lease may still
	// be live, and it is ours.
	wctx, cancel := context.WithTimeout(ctx, defaultOpTimeout)
	defer cancel()
	rev, err := s.writeLease(wctx, 0, started)
	if err != nil {
		return err
	}
	l := &lease{done: make(chan struct{})}
	s.lease = l
	go s.renew(ctx, l, rev, started)
	return nil
}

func (s *Store) renew(ctx context.Context, l *lease, rev uint64, started time.Time) {
	defer close(l.done)
	t := time.NewTicker(s.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return // no goodbye: peers see the lease lapse, as after a crash
		case <-s.stop:
			s.leave(rev)
			return
		case <-t.C:
		}
		// A renewal slower than Lease/2 is as good as lost: give up on it
		// and try again at the next tick, still within the lease.
		wctx, cancel := context.WithTimeout(ctx, s.cfg.Lease/2)
		r, err := s.writeLease(wctx, rev, started)
		if err != nil && isWrongLastSeq(err) {
			s.log.Error("lease had lapsed; taking it again (peers may have adopted this member's work)", "member", s.cfg.Member)
			s.obs.LeaseRenewed(err)
			r, err = s.writeLease(wctx, 0, started)
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("lease renewal failed", "err", err)
				s.obs.LeaseRenewed(err)
			}
			continue
		}
		rev = r
		s.obs.LeaseRenewed(nil)
	}
}

// SetPending tells the store how much work this member has pending, for
// its next lease renewal (MemberInfo.Pending): its peers add it up to
// tell when the whole group is full, as often as leases are renewed.
func (s *Store) SetPending(n int) { s.pendingNow.Store(int64(n)) }

// writeLease writes this member's lease with a TTL of Lease; with last > 0
// only if the key is still at revision last.
func (s *Store) writeLease(ctx context.Context, last uint64, started time.Time) (rev uint64, err error) {
	defer s.timed("lease", time.Now(), &err)
	val, err := json.Marshal(MemberInfo{ID: s.cfg.Member, MaxPending: s.cfg.MaxPending, Pending: int(s.pendingNow.Load()),
		Started: started, Renewed: time.Now().UTC(), Lease: Duration(s.cfg.Lease)})
	if err != nil {
		return 0, err
	}
	// The KV API sets a key's TTL only on Create; a renewal is a publish to
	// the key's subject with its own TTL, which is exactly what a KV write
	// is underneath.
	m := nats.NewMsg("$KV." + bucketName("members", s.cfg.Space) + "." + key(s.cfg.Member))
	m.Data = val
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(s.cfg.Lease)}
	if last > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(last))
	}
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return 0, fmt.Errorf("state: write lease: %w", err)
	}
	return ack.Sequence, nil
}

// leave removes this member's lease on a graceful Close.
func (s *Store) leave(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.members.Purge(ctx, key(s.cfg.Member), jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	if err != nil {
		s.log.Warn("could not remove lease on close; peers adopt when it lapses", "err", err)
	}
}

// Members returns the members whose lease is live, this one included.
func (s *Store) Members(ctx context.Context) (ms []MemberInfo, err error) {
	defer s.timed("list", time.Now(), &err)
	entries, err := s.snapshot(ctx, s.members)
	if err != nil {
		return nil, fmt.Errorf("state: list members: %w", err)
	}
	for _, e := range entries {
		var m MemberInfo
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			s.log.Error("skipping unreadable lease", "key", e.Key(), "err", err)
			continue
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// alive reports whether member's lease is live.
func (s *Store) alive(ctx context.Context, member string) (bool, error) {
	_, err := s.members.Get(ctx, key(member))
	switch {
	case err == nil:
		return true, nil
	case errNoEntry(err):
		return false, nil
	}
	return false, fmt.Errorf("state: read lease of %q: %w", truncate(member), err)
}

// WatchLapsed reports members whose work may need adopting: first every
// other owner of pending records or queued answers without a live lease
// (work left by members gone while nobody watched), then each member whose
// lease expires or is removed, and again in a sweep every few leases (an
// adoption that lost a race, or an event missed across a reconnect). The
// same member may be reported more than once; Adopt is idempotent. The
// channel is closed when ctx is done or the store closes.
func (s *Store) WatchLapsed(ctx context.Context) (<-chan string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	w, err := s.members.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("state: watch members: %w", err)
	}
	out := make(chan string, 16)
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		defer close(out)
		defer w.Stop()
		emit := func(id string) bool { return sendOpen(ctx, s, out, id) }
		sweep := func() bool {
			ids, err := s.orphanOwners(ctx)
			if err != nil {
				s.log.Warn("sweep for lapsed members failed", "err", err)
				return true
			}
			for _, id := range ids {
				if !emit(id) {
					return false
				}
			}
			return true
		}
		if !sweep() {
			return
		}
		t := time.NewTicker(s.sweepEvery)
		defer t.Stop()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() == nil {
						s.log.Warn("members watcher closed; lapses are no longer reported")
					}
					return
				}
				if e == nil || e.Operation() == jetstream.KeyValuePut {
					continue
				}
				if id, ok := idOf(e.Key()); ok && id != s.cfg.Member && !emit(id) {
					return
				}
			case <-t.C:
				if !sweep() {
					return
				}
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			}
		}
	}()
	return out, nil
}

// orphanOwners returns the owners, other than this member, of pending
// records or queued answers whose lease is not live.
func (s *Store) orphanOwners(ctx context.Context) ([]string, error) {
	live := map[string]bool{s.cfg.Member: true}
	ms, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		live[m.ID] = true
	}
	owners := map[string]bool{}
	ps, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		owners[p.Owner] = true
	}
	as, err := s.allAnswers(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		owners[a.Owner] = true
	}
	var out []string
	for o := range owners {
		if !live[o] {
			out = append(out, o)
		}
	}
	return out, nil
}

func (s *Store) allAnswers(ctx context.Context) ([]*Answer, error) {
	entries, err := s.snapshot(ctx, s.outbox)
	if err != nil {
		return nil, fmt.Errorf("state: list outbox: %w", err)
	}
	var as []*Answer
	for _, e := range entries {
		if a, err := decodeAnswer(e); err == nil {
			as = append(as, a)
		}
	}
	return as, nil
}

// Adopt takes over the pending records and queued answers of member from,
// whose lease must have lapsed (else ErrMemberAlive: a stale or forged
// report must not move a live member's work). Each record moves by
// compare-and-set, so when several members adopt at once each record goes
// to exactly one of them; the records this call won are returned (resume
// them as after a restart). Its answers are then in Outbox.
func (s *Store) Adopt(ctx context.Context, from string) (won []*lifecycle.Proposal, err error) {
	if from == s.cfg.Member {
		return nil, errors.New("state: cannot adopt from self; use Owned")
	}
	live, err := s.alive(ctx, from)
	if err != nil {
		return nil, err
	}
	if live {
		return nil, ErrMemberAlive
	}
	ps, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.Owner != from {
			continue
		}
		p.Owner = s.cfg.Member
		switch err := s.Update(ctx, p); {
		case err == nil:
			won = append(won, p)
		case errors.Is(err, ErrConflict):
			// A peer adopted it first, or it ended.
		default:
			return won, err
		}
	}
	as, err := s.allAnswers(ctx)
	if err != nil {
		return won, err
	}
	n := len(won)
	for _, a := range as {
		if a.Owner != from {
			continue
		}
		a.Owner = s.cfg.Member
		val, err := json.Marshal(a)
		if err != nil {
			return won, err
		}
		if _, err := s.outbox.Update(ctx, key(a.ProposalID), val, a.StoreRevision); err != nil {
			if isWrongLastSeq(err) {
				continue
			}
			return won, fmt.Errorf("state: adopt answer %q: %w", truncate(a.ProposalID), err)
		}
		n++
	}
	if n > 0 {
		s.log.Info("adopted work of lapsed member", "from", from, "records", len(won), "answers", n-len(won))
		s.obs.Adopted(from, n)
	}
	return won, nil
}
