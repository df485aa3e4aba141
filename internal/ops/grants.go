package ops

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
)

// Grants is what the operator API reads and revokes of the grants;
// *grantstore.Registry provides it.
type Grants interface {
	List() []grants.Grant
	Revoke(ctx context.Context, id string) (grants.Grant, error)
	// Usable reports whether a grant can match anything now: live, and
	// not pinned to a proposer unless the gateway authenticates senders.
	Usable(g grants.Grant, now time.Time) bool
}

// GrantView is one grant as GET /v1/grants shows it: the grant, whether
// it is pinned to one proposer (its proposer field; otherwise anyone who
// may propose in the space can use it), and whether it still matches
// anything now — a grant pinned to a proposer does not where the gateway
// is not said to authenticate senders (docs/design.md "Proposer identity
// and grants"), and is then listed with proposer_pinned and live false
// although neither expired nor revoked.
type GrantView struct {
	grants.Grant
	ProposerPinned bool `json:"proposer_pinned"`
	Live           bool `json:"live"`
}

func viewOfGrant(g Grants, gr grants.Grant, now time.Time) GrantView {
	return GrantView{Grant: gr, ProposerPinned: gr.ProposerPinned(), Live: g.Usable(gr, now)}
}

// GrantList is the GET /v1/grants body: every grant the store still
// keeps, live or not (expired and revoked ones for a day), oldest first.
type GrantList struct {
	Grants []GrantView `json:"grants"`
}

func (h *Handler) grantsOrUnavailable(w http.ResponseWriter) Grants {
	h.mu.RLock()
	g := h.grants
	h.mu.RUnlock()
	if g == nil {
		writeError(w, http.StatusServiceUnavailable, "the fulfiller is not running yet")
	}
	return g
}

func (h *Handler) listGrants(w http.ResponseWriter, _ *http.Request) {
	g := h.grantsOrUnavailable(w)
	if g == nil {
		return
	}
	now := h.opts.Now()
	out := GrantList{Grants: []GrantView{}}
	for _, gr := range g.List() {
		out.Grants = append(out.Grants, viewOfGrant(g, gr, now))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) showGrant(w http.ResponseWriter, r *http.Request) {
	g := h.grantsOrUnavailable(w)
	if g == nil {
		return
	}
	id := r.PathValue("id")
	for _, gr := range g.List() {
		if gr.ID == id {
			writeJSON(w, http.StatusOK, viewOfGrant(g, gr, h.opts.Now()))
			return
		}
	}
	writeError(w, http.StatusNotFound, "no grant "+id)
}

func (h *Handler) revokeGrant(w http.ResponseWriter, r *http.Request) {
	g := h.grantsOrUnavailable(w)
	if g == nil {
		return
	}
	id := r.PathValue("id")
	already := false // a second revoke is harmless, and not counted again
	for _, gr := range g.List() {
		already = already || (gr.ID == id && gr.Revoked)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	gr, err := g.Revoke(ctx, id)
	switch {
	case err == nil:
		if h.opts.Metrics != nil && !already {
			h.opts.Metrics.GrantRevoked()
		}
		h.opts.Logger.Info("grant revoked by the operator", "grant", id, "proposer", gr.Proposer, "tool", gr.Tool, "remote", r.RemoteAddr)
		writeJSON(w, http.StatusOK, GrantView{Grant: gr, ProposerPinned: gr.ProposerPinned(), Live: false})
	case errors.Is(err, grantstore.ErrUnknown):
		writeError(w, http.StatusNotFound, "no grant "+id)
	default:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}
