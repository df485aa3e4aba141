package fulfill

import (
	"context"

	"github.com/mewkit/fulfiller/state"
)

// Store is the persistence of pending work (DESIGN "Durable and shared
// pending work"); *state.Store implements it. With a Store the Fulfiller
// claims every proposal before it decides it, records each step before the
// envelope that carries it out is written, resumes its own unanswered work
// on start and adopts the work of group members whose lease lapsed. Without
// one (Config.Store nil, `--state memory`) pending work lives only in this
// process and dies with it.
type Store interface {
	// Member is this fulfiller's member id in the group.
	Member() string
	// Claim wins a proposal id for this member once for the whole group
	// and SeenTTL (rule 5); a lost claim means send nothing.
	Claim(ctx context.Context, proposalID string) (won bool, err error)
	// Put records a newly claimed proposal; Update and Delete compare and
	// set on p.StoreRevision (state.ErrConflict: someone else owns it now).
	Put(ctx context.Context, p *state.Pending) error
	Update(ctx context.Context, p *state.Pending) error
	Delete(ctx context.Context, p *state.Pending) error
	// List is the group's pending work; Owned is this member's.
	List(ctx context.Context) ([]*state.Pending, error)
	Owned(ctx context.Context) ([]*state.Pending, error)
	// Members are the group's live leases.
	Members(ctx context.Context) ([]state.MemberInfo, error)
	// WatchLapsed reports members whose lease lapsed with work left;
	// Adopt moves that work to this member, each record to one adopter.
	WatchLapsed(ctx context.Context) (<-chan string, error)
	Adopt(ctx context.Context, from string) ([]*state.Pending, error)
}

var _ Store = (*state.Store)(nil)
