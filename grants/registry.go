package grants

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

	"github.com/mewkit/fulfiller/state"
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

	mu    sync.Mutex
	byID  map[string]Grant
	ready chan struct{} // closed once the store's grants are loaded
	once  sync.Once
}

// NewRegistry returns a registry over st (nil: memory only).
func NewRegistry(st Store, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{store: st, log: log, byID: map[string]Grant{}, ready: make(chan struct{})}
	if st == nil {
		r.once.Do(func() { close(r.ready) })
	}
	return r
}

// Run mirrors the store's grants until ctx ends, watching again after a
// lost connection. Without a store it returns at once.
func (r *Registry) Run(ctx context.Context) error {
	if r.store == nil {
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

// follow applies one watch: the stored grants replace what was known
// (a grant removed while the watch was down must not linger), then every
// change.
func (r *Registry) follow(ctx context.Context) error {
	ch, err := r.store.WatchGrants(ctx)
	if err != nil {
		return err
	}
	fresh := map[string]Grant{}
	loading := true
	for c := range ch {
		switch {
		case c.Current:
			r.mu.Lock()
			r.byID, fresh, loading = fresh, nil, false
			r.mu.Unlock()
			r.once.Do(func() { close(r.ready) })
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
func (r *Registry) decode(c state.GrantChange) (Grant, bool) {
	if c.Grant == nil {
		return Grant{}, false
	}
	var g Grant
	if err := json.Unmarshal(c.Grant.Doc, &g); err != nil || g.ID != c.Grant.ID {
		r.log.Warn("unreadable grant ignored", "grant", c.Grant.ID, "err", err)
		return Grant{}, false
	}
	g.Revoked = g.Revoked || c.Grant.Revoked
	return g, true
}

// Ready is closed once the store's grants are known (at once without a
// store). Until then Matching knows none: proposals are asked about, as
// without grants, rather than decided on a partial view.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

// Create stores g and makes it known here at once (the other members
// learn it from their watch).
func (r *Registry) Create(ctx context.Context, g Grant) error {
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
func (r *Registry) Revoke(ctx context.Context, id string) (Grant, error) {
	if r.store != nil {
		sg, err := r.store.RevokeGrant(ctx, id)
		if errors.Is(err, state.ErrNotFound) {
			return Grant{}, ErrUnknown
		} else if err != nil {
			return Grant{}, fmt.Errorf("revoke grant %s: %w", id, err)
		}
		g, ok := r.decode(state.GrantChange{Grant: sg})
		if !ok {
			return Grant{}, fmt.Errorf("revoke grant %s: unreadable record", id)
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
		return Grant{}, ErrUnknown
	}
	g.Revoked = true
	r.byID[id] = g
	return g, nil
}

// List returns every known grant, live or not, oldest first.
func (r *Registry) List() []Grant {
	r.mu.Lock()
	out := make([]Grant, 0, len(r.byID))
	for _, g := range r.byID {
		out = append(out, g)
	}
	r.mu.Unlock()
	slices.SortFunc(out, byCreated)
	return out
}

// Matching are the live grants that cover c at now (Grant.Matches:
// proposer, tool and every pinned value), oldest first: what policies see
// as input.grants. Grants that share only the proposer and tool are left
// out, so that no policy has to compare pinned values itself (and get a
// prefix or a canonical number wrong).
func (r *Registry) Matching(c Call, now time.Time) []Grant {
	var out []Grant
	r.mu.Lock()
	for _, g := range r.byID {
		if g.Matches(c, now) {
			out = append(out, g)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, byCreated)
	return out
}

func byCreated(a, b Grant) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}
