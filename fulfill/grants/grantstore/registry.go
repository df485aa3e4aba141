// Package grantstore keeps a fulfiller's grants (package grants): a
// Registry mirrors in memory what the JetStream store (package state)
// holds, so that a group shares its grants and a decision never waits on
// the store, and reports expiries. The grant itself, and which calls it
// covers, are package grants', which depends on neither.
package grantstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// Store keeps grants for a group; *state.Store is one.
type Store interface {
	PutGrant(ctx context.Context, g *state.Grant) error
	RevokeGrant(ctx context.Context, id string) (*state.Grant, error)
	WatchGrants(ctx context.Context) (<-chan state.GrantChange, error)
}

// ErrUnknown: no such grant.
var ErrUnknown = errors.New("no such grant")

// Registry is the one owner of a fulfiller's view of the grants: what the
// store holds (so a group shares them), mirrored in memory by Run so that
// a decision never waits on the store. Without a store the grants live in
// memory alone, for one process (demo, bench, tests).
type Registry struct {
	store Store
	log   *slog.Logger

	// authenticatedFrom: the operator says the gateway authenticates
	// senders (--gateway-authenticates-from), so a proposal's from may
	// be relied on and grants pinned to a proposer match.
	authenticatedFrom bool

	mu       sync.Mutex
	byID     map[string]grants.Grant
	expired  map[string]bool // grants whose expiry was reported
	onExpire func(grants.Grant)
	ready    chan struct{} // closed once the store's grants are loaded
	once     sync.Once
}

// Keep is how long a grant that expired or was revoked stays listed (and
// in the store, which removes it then): long enough to audit, bounded so
// that years of grants do not pile up in memory.
const Keep = 24 * time.Hour

// expiryCheck bounds how long an expiry goes unnoticed by OnExpire when
// no other grant expires sooner (a grant stops matching at its expiry
// whatever this says: Matches compares the time itself).
const expiryCheck = time.Minute

// NewRegistry returns a registry over st (nil: memory only).
func NewRegistry(st Store, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{store: st, log: log, byID: map[string]grants.Grant{}, expired: map[string]bool{}, ready: make(chan struct{})}
	if st == nil {
		r.once.Do(func() { close(r.ready) })
	}
	return r
}

// GatewayAuthenticatesFrom tells the registry that the gateway
// authenticates senders (run's --gateway-authenticates-from), so grants
// pinned to a proposer may match; call it before Run. Without it (the
// default) from is a claim any participant can make (docs/design.md
// "Proposer identity and grants"): a grant pinned to a proposer matches
// nothing — it would let through whoever claims that name — and is still
// listed, with a warning when the store's grants are loaded.
func (r *Registry) GatewayAuthenticatesFrom(on bool) { r.authenticatedFrom = on }

// AuthenticatesFrom reports what GatewayAuthenticatesFrom set: whether
// grants may be pinned to a proposer.
func (r *Registry) AuthenticatesFrom() bool { return r.authenticatedFrom }

// Usable reports whether g can match anything at now: live, and not
// pinned to a proposer unless proposers are authenticated.
func (r *Registry) Usable(g grants.Grant, now time.Time) bool {
	return g.Live(now) && (!g.ProposerPinned() || r.authenticatedFrom)
}

// OnExpire sets fn to be called (from Run) once for each grant that
// expires unrevoked; call it before Run.
func (r *Registry) OnExpire(fn func(grants.Grant)) { r.onExpire = fn }

// Run mirrors the store's grants until ctx ends, watching again after a
// lost connection, reports expiries to OnExpire's fn and forgets grants
// Keep after they ended.
func (r *Registry) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.expire(ctx)
	}()
	defer wg.Wait()
	if r.store == nil {
		<-ctx.Done()
		return nil
	}
	for {
		err := r.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("grant watch ended; watching again", "err", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil
		}
	}
}

// expire wakes at each grant's expiry (at least every expiryCheck) until
// ctx ends.
func (r *Registry) expire(ctx context.Context) {
	for {
		next := r.sweep(time.Now())
		t := time.NewTimer(min(max(time.Until(next), 10*time.Millisecond), expiryCheck))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// sweep reports the grants expired at now, forgets those ended Keep ago,
// and returns the next expiry (zero: none).
func (r *Registry) sweep(now time.Time) (next time.Time) {
	var ended []grants.Grant
	r.mu.Lock()
	for id, g := range r.byID {
		if g.Revoked || !now.Before(g.Expires) {
			if now.Sub(g.Expires) > Keep {
				delete(r.byID, id)
				delete(r.expired, id)
				continue
			}
			if !g.Revoked && !r.expired[id] {
				r.expired[id] = true
				ended = append(ended, g)
			}
			continue
		}
		if next.IsZero() || g.Expires.Before(next) {
			next = g.Expires
		}
	}
	r.mu.Unlock()
	slices.SortFunc(ended, byCreated)
	for _, g := range ended {
		r.log.Info("grant expired", "grant", g.ID, "proposer", g.Proposer, "tool", g.Tool, "expired", g.Expires)
		if r.onExpire != nil {
			r.onExpire(g)
		}
	}
	return next
}

// follow applies one watch: the stored grants replace what was known
// (a grant removed while the watch was down must not linger), then every
// change.
func (r *Registry) follow(ctx context.Context) error {
	ch, err := r.store.WatchGrants(ctx)
	if err != nil {
		return err
	}
	fresh := map[string]grants.Grant{}
	loading := true
	for c := range ch {
		switch {
		case c.Current:
			r.mu.Lock()
			r.byID, fresh, loading = fresh, nil, false
			r.mu.Unlock()
			r.once.Do(func() {
				r.warnPinned(time.Now())
				close(r.ready)
			})
		case loading:
			if g, ok := r.decode(c); ok {
				fresh[g.ID] = g
			}
		default:
			g, ok := r.decode(c)
			r.mu.Lock()
			if ok {
				r.byID[g.ID] = g
			} else {
				delete(r.byID, c.ID)
			}
			r.mu.Unlock()
		}
	}
	return errors.New("watch closed")
}

// decode reads a stored grant. An unreadable one is dropped (fail closed:
// a grant that cannot be read exactly allows nothing).
func (r *Registry) decode(c state.GrantChange) (grants.Grant, bool) {
	if c.Grant == nil {
		return grants.Grant{}, false
	}
	var g grants.Grant
	if err := json.Unmarshal(c.Grant.Doc, &g); err != nil || g.ID != c.Grant.ID {
		r.log.Warn("unreadable grant ignored", "grant", c.Grant.ID, "err", err)
		return grants.Grant{}, false
	}
	g.Revoked = g.Revoked || c.Grant.Revoked
	return g, true
}

// warnPinned warns, once at start, about each live grant pinned to a
// proposer that matches nothing here because proposers are not
// authenticated: an operator who relied on it learns why calls it used to
// let through are asked about again.
func (r *Registry) warnPinned(now time.Time) {
	if r.authenticatedFrom {
		return
	}
	for _, g := range r.List() {
		if g.Live(now) && g.ProposerPinned() {
			r.log.Warn("grant pinned to a proposer matches nothing: the gateway is not said to authenticate senders (--gateway-authenticates-from), so anyone could claim to be that proposer; revoke it, or run with the flag if the gateway does authenticate them",
				"grant", g.ID, "proposer", g.Proposer, "tool", g.Tool, "expires", g.Expires)
		}
	}
}

// Ready is closed once the store's grants are known (at once without a
// store). Until then Matching knows none: proposals are asked about, as
// without grants, rather than decided on a partial view.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

// Create stores g and makes it known here at once (the other members
// learn it from their watch).
func (r *Registry) Create(ctx context.Context, g grants.Grant) error {
	if r.store != nil {
		doc, err := json.Marshal(g)
		if err != nil {
			return fmt.Errorf("encode grant %s: %w", g.ID, err)
		}
		if err := r.store.PutGrant(ctx, &state.Grant{ID: g.ID, Expires: g.Expires, Doc: doc}); err != nil {
			return fmt.Errorf("store grant %s: %w", g.ID, err)
		}
	}
	r.mu.Lock()
	r.byID[g.ID] = g
	r.mu.Unlock()
	return nil
}

// Revoke revokes the grant id here at once and in the store; ErrUnknown
// when there is no such grant.
func (r *Registry) Revoke(ctx context.Context, id string) (grants.Grant, error) {
	if r.store != nil {
		sg, err := r.store.RevokeGrant(ctx, id)
		if errors.Is(err, state.ErrNotFound) {
			return grants.Grant{}, ErrUnknown
		} else if err != nil {
			return grants.Grant{}, fmt.Errorf("revoke grant %s: %w", id, err)
		}
		g, ok := r.decode(state.GrantChange{Grant: sg})
		if !ok {
			return grants.Grant{}, fmt.Errorf("revoke grant %s: unreadable record", id)
		}
		r.mu.Lock()
		r.byID[id] = g
		r.mu.Unlock()
		return g, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.byID[id]
	if !ok {
		return grants.Grant{}, ErrUnknown
	}
	g.Revoked = true
	r.byID[id] = g
	return g, nil
}

// List returns every known grant, live or not, oldest first.
func (r *Registry) List() []grants.Grant {
	r.mu.Lock()
	out := make([]grants.Grant, 0, len(r.byID))
	for _, g := range r.byID {
		out = append(out, g)
	}
	r.mu.Unlock()
	slices.SortFunc(out, byCreated)
	return out
}

// Names reports whether any grant, live or not, is for tool: when none
// is, no call of tool can match one, and a caller may skip decoding the
// call's arguments for Matching (most calls, on most deployments).
func (r *Registry) Names(tool string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.byID {
		if g.Tool == tool {
			return true
		}
	}
	return false
}

// Matching are the usable grants that cover c at now (grants.Grant.Matches:
// proposer when pinned, tool and every pinned value; Usable: a grant
// pinned to a proposer only when proposers are authenticated), oldest
// first: what policies see as input.grants. Grants that share only the
// proposer and tool are left out, so that no policy has to compare pinned
// values itself (and get a prefix or a canonical number wrong).
func (r *Registry) Matching(c grants.Call, now time.Time) []grants.Grant {
	var out []grants.Grant
	r.mu.Lock()
	for _, g := range r.byID {
		if r.Usable(g, now) && g.Matches(c, now) {
			out = append(out, g)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, byCreated)
	return out
}

func byCreated(a, b grants.Grant) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}
