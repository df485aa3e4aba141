// Package ops is fulfiller's operations surface on --http: liveness and
// readiness probes, Prometheus metrics, and the operator API for pending
// proposals and the policy in force.
//
// Routes (JSON unless noted):
//
//	GET    /healthz             200 {"status":"ok"} while the process serves HTTP
//	GET    /readyz              200 when the agent has a welcome whose capabilities let it answer, a policy is loaded, the decision log (if any) can be written and the state store (if any) accepts writes, else 503 with the reason
//	GET    /metrics             Prometheus text format
//	GET    /v1/proposals        the group's pending proposals, oldest first, with owner, state, age and deadline; with a "warning" when the store could not be read (then only this member's are listed)
//	GET    /v1/proposals/{id}   one pending proposal of the group; 404 when it is not pending, 503 when the store cannot say
//	DELETE /v1/proposals/{id}   reject it (reason "other", message naming the operator), from this member whichever member holds it; 409 when already answered, 503 when the store cannot be reached
//	GET    /v1/policy           revision, files, whether it is the built-in default, last reload error
//	GET    /v1/tools            every tool discovered in the space: owner, description, the annotations policies see (a declared tool's --tool-metadata, else the owner's), the owner's own, and the --tool-metadata entry that applied
//	GET    /v1/grants           every grant kept (live, expired or revoked), oldest first, each with "live"
//	GET    /v1/grants/{id}      one grant; 404 when there is none
//	DELETE /v1/grants/{id}      revoke it: it stops matching at once (on every member of a group as their watch delivers); 404 when there is none
//	any other /v1/ request      404 {"error":…}, or 405 with Allow when the path is a route's under another method
//
// /v1/ requires "Authorization: Bearer <token>" and is closed (401) when
// no token is configured; the probes and /metrics stay open so that
// kubelets and Prometheus need no secret. Bind the listener to localhost
// unless a network policy guards it.
package ops

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
)

// Operator is what the operator API needs of the lifecycle owner;
// *fulfill.Fulfiller provides it. Listing and showing read the group's
// pending-work store, hence the context; an error wrapping
// fulfill.ErrStoreUnavailable says the store could not be read.
type Operator interface {
	GroupPending(ctx context.Context) ([]fulfill.Snapshot, error)
	GroupGet(ctx context.Context, id string) (fulfill.Snapshot, bool, error)
	Cancel(id, by string) error
	// ToolViews lists the tools discovered in the space as policies see
	// them (GET /v1/tools).
	ToolViews() []fulfill.ToolView
}

// Options configure Handler.
type Options struct {
	// Source is the live state: gateway, policy and counts. The same
	// Source feeds the metrics' gauges.
	Source *Source
	// Metrics, when set, is served on /metrics.
	Metrics *Metrics
	// Token guards /v1/ with a bearer token. Never logged. Without one
	// the operator API is closed: every /v1/ request gets 401.
	Token string
	// Grants, when set, is served on /v1/grants.
	Grants Grants
	Logger *slog.Logger
	Now    func() time.Time // [time.Now]
}

// Handler serves the routes in the package doc. Its Operator is set with
// SetOperator once the fulfiller exists; until then /v1/proposals answers
// 503.
type Handler struct {
	opts Options
	mux  *http.ServeMux

	mu     sync.RWMutex
	op     Operator
	grants Grants
}

// NewHandler builds the handler.
func NewHandler(opts Options) *Handler {
	if opts.Source == nil {
		opts.Source = &Source{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Handler{opts: opts, mux: http.NewServeMux(), grants: opts.Grants}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	h.mux.HandleFunc("GET /readyz", h.readyz)
	if opts.Metrics != nil {
		h.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Metrics.Registry(), promhttp.HandlerOpts{Registry: opts.Metrics.Registry()}))
	}
	h.mux.Handle("GET /v1/proposals", h.auth(h.list))
	h.mux.Handle("GET /v1/proposals/{id}", h.auth(h.show))
	h.mux.Handle("DELETE /v1/proposals/{id}", h.auth(h.cancel))
	h.mux.Handle("GET /v1/policy", h.auth(h.policy))
	h.mux.Handle("GET /v1/tools", h.auth(h.tools))
	h.mux.Handle("GET /v1/grants", h.auth(h.listGrants))
	h.mux.Handle("GET /v1/grants/{id}", h.auth(h.showGrant))
	h.mux.Handle("DELETE /v1/grants/{id}", h.auth(h.revokeGrant))
	// Any other /v1/ request: a JSON error like every /v1/ answer (the
	// mux's own are plain text), behind the token like the routes.
	h.mux.Handle(v1Fallback, h.auth(h.noRoute))
	return h
}

// v1Fallback is the pattern of the /v1/ requests no route takes.
const v1Fallback = "/v1/"

// noRoute answers a /v1/ request no route takes: 405 with Allow when the
// path is a route's with another method, else 404.
func (h *Handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != v1Fallback && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
		return
	}
	writeError(w, http.StatusNotFound, "no such route: "+r.URL.Path+" (see docs/operations.md, \"The HTTP listener\")")
}

// SetGrants makes the fulfiller's grants known to the operator API.
func (h *Handler) SetGrants(g Grants) { h.mu.Lock(); h.grants = g; h.mu.Unlock() }

// SetOperator makes the fulfiller known to the operator API.
func (h *Handler) SetOperator(op Operator) { h.mu.Lock(); h.op = op; h.mu.Unlock() }

func (h *Handler) operator() Operator { h.mu.RLock(); defer h.mu.RUnlock(); return h.op }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Readiness is the /readyz body.
type Readiness struct {
	Status   string `json:"status"`           // ready or not_ready
	Reason   string `json:"reason,omitempty"` // why not ready
	Gateway  string `json:"gateway"`          // connected, disconnected or unknown
	Revision string `json:"revision,omitempty"`
	Default  bool   `json:"default_policy,omitempty"`
	// ReloadError is the last failed reload: the previous policy is still
	// in force, so it does not make the fulfiller unready.
	ReloadError string `json:"reload_error,omitempty"`
	// DecisionLog is "ok" or "failing" with --decision-log; a failing log
	// makes the fulfiller unready: it refuses to fulfil or escalate.
	DecisionLog string `json:"decision_log,omitempty"`
	// Store is "ok" or "failing" with a state store (not with --state
	// memory); a store that does not accept writes makes the fulfiller
	// unready: pending work cannot be kept.
	Store string `json:"store,omitempty"`
	// Grants is "loaded" or "loading": until the grants in the state
	// store are loaded the fulfiller is not ready (a decision waits for
	// them, up to 10s).
	Grants string `json:"grants,omitempty"`
}

// Capable is implemented by a Gateway that knows the capabilities the
// gateway granted it (*agent.Client does); /readyz then checks that they
// let fulfiller answer proposals.
type Capable interface {
	Capabilities() []agent.Capability
}

// answerKinds are what fulfiller must be able to send to answer any
// proposal (docs/design.md rule 9): reject it, and fulfil a tool call.
var answerKinds = []struct {
	name, kind string
	payload    json.RawMessage
}{
	{"mcp/reject", agent.KindReject, json.RawMessage(`{"reason":"policy"}`)},
	{"mcp/request tools/call", agent.KindRequest, json.RawMessage(`{"method":"tools/call"}`)},
}

// CannotAnswer says which answers caps do not permit, or is empty. A
// reference gateway given a wrong token still joins the participant, with
// only chat and mcp/response: everything fulfiller would say is then
// refused.
func CannotAnswer(caps []agent.Capability) string {
	var missing []string
	for _, a := range answerKinds {
		if !agent.Permits(caps, a.kind, a.payload) {
			missing = append(missing, a.name)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	granted := make([]string, len(caps))
	for i, c := range caps {
		granted[i] = c.String()
	}
	return fmt.Sprintf("the capabilities the gateway granted (%s) do not permit %s: check the token", strings.Join(granted, ", "), strings.Join(missing, " or "))
}

// Ready reports readiness as /readyz does (docs/design.md rule 9).
func (h *Handler) Ready() Readiness {
	gw, pol, _ := h.opts.Source.get()
	r := Readiness{Status: "ready", Gateway: "unknown"}
	var reasons []string
	switch {
	case gw == nil:
		reasons = append(reasons, "not joined to the space yet")
	case gw.Connected():
		r.Gateway = "connected"
		if c, ok := gw.(Capable); ok {
			if why := CannotAnswer(c.Capabilities()); why != "" {
				reasons = append(reasons, why)
			}
		}
	default:
		r.Gateway = "disconnected"
		reasons = append(reasons, "no welcome from the gateway (reconnecting)")
	}
	if pol == nil {
		reasons = append(reasons, "no policy loaded")
	} else {
		r.Revision, r.Default = pol.Revision(), pol.IsDefault()
		if err := pol.LastReloadError(); err != nil {
			r.ReloadError = err.Error()
		}
	}
	if a := h.opts.Source.auditLog(); a != nil {
		r.DecisionLog = "ok"
		if err := a.Healthy(); err != nil {
			r.DecisionLog = "failing"
			reasons = append(reasons, "the decision log cannot be written ("+err.Error()+"): fulfilments and escalations are refused")
		}
	}
	if st := h.opts.Source.storeHealth(); st != nil {
		r.Store = "ok"
		if err := st.Healthy(); err != nil {
			r.Store = "failing"
			reasons = append(reasons, err.Error())
		}
	}
	if g := h.opts.Source.grantsLoader(); g != nil {
		select {
		case <-g.Ready():
			r.Grants = "loaded"
		default:
			r.Grants = "loading"
			reasons = append(reasons, "the grants in the state store are not loaded yet")
		}
	}
	if len(reasons) > 0 {
		r.Status, r.Reason = "not_ready", strings.Join(reasons, "; ")
	}
	return r
}

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	r := h.Ready()
	code := http.StatusOK
	if r.Status != "ready" {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, r)
}

// ClosedMessage is the error of every /v1/ answer (401) while no token
// is configured.
const ClosedMessage = "the operator API is closed: no token is configured (start fulfiller with --http-token-file FILE or FULFILLER_HTTP_TOKEN)"

// auth guards a route with the bearer token, compared in constant time.
// Default deny: without a configured token nobody gets in, so that
// forgetting the token cannot open the API to whoever reaches the port.
func (h *Handler) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fulfiller"`)
		if h.opts.Token == "" {
			writeError(w, http.StatusUnauthorized, ClosedMessage)
			return
		}
		// The scheme is case-insensitive (RFC 7235); the token is not.
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) != 1 {
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		w.Header().Del("WWW-Authenticate")
		next(w, r)
	})
}

// ProposalView is a pending proposal as the operator API shows it.
type ProposalView struct {
	fulfill.Snapshot
	AgeSeconds float64 `json:"age_seconds"`
}

// ProposalList is the GET /v1/proposals body.
type ProposalList struct {
	Proposals []ProposalView `json:"proposals"`
	// Warning says the list is incomplete: the group's store could not be
	// read, so only this member's proposals are in it. An operator
	// looking for a proposal must not take its absence for an answer.
	Warning string `json:"warning,omitempty"`
}

func (h *Handler) view(s fulfill.Snapshot) ProposalView {
	return ProposalView{Snapshot: s, AgeSeconds: h.opts.Now().Sub(s.Received).Seconds()}
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	op := h.operator()
	if op == nil {
		writeError(w, http.StatusServiceUnavailable, "the fulfiller is not running yet")
		return
	}
	out := ProposalList{Proposals: []ProposalView{}}
	// What this member holds is worth showing even when the store is
	// not: 200 with the warning, rather than 503 and nothing.
	snaps, err := op.GroupPending(r.Context())
	if err != nil {
		h.opts.Logger.Warn("operator API lists only this member's proposals", "err", err)
		out.Warning = "only this member's proposals are listed: " + err.Error()
	}
	for _, s := range snaps {
		out.Proposals = append(out.Proposals, h.view(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) show(w http.ResponseWriter, r *http.Request) {
	op := h.operator()
	if op == nil {
		writeError(w, http.StatusServiceUnavailable, "the fulfiller is not running yet")
		return
	}
	s, ok, err := op.GroupGet(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "no pending proposal "+r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, h.view(s))
}

// CancelResult is the DELETE /v1/proposals/{id} body on success.
type CancelResult struct {
	ID     string `json:"id"`
	Status string `json:"status"` // rejected
	Reason string `json:"reason"` // other
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	op := h.operator()
	if op == nil {
		writeError(w, http.StatusServiceUnavailable, "the fulfiller is not running yet")
		return
	}
	id := r.PathValue("id")
	err := op.Cancel(id, "http "+r.RemoteAddr)
	switch {
	case err == nil:
		h.opts.Logger.Info("proposal cancelled by the operator", "proposal", id, "remote", r.RemoteAddr)
		writeJSON(w, http.StatusOK, CancelResult{ID: id, Status: "rejected", Reason: "other"})
	case errors.Is(err, fulfill.ErrUnknownProposal):
		writeError(w, http.StatusNotFound, "no pending proposal "+id)
	case errors.Is(err, fulfill.ErrAnswered):
		writeError(w, http.StatusConflict, "proposal "+id+" was already answered, or its fulfilment request is out")
	case errors.Is(err, fulfill.ErrStoreUnavailable):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// ToolList is the GET /v1/tools body.
type ToolList struct {
	Tools []fulfill.ToolView `json:"tools"`
}

func (h *Handler) tools(w http.ResponseWriter, _ *http.Request) {
	op := h.operator()
	if op == nil {
		writeError(w, http.StatusServiceUnavailable, "the fulfiller is not running yet")
		return
	}
	out := ToolList{Tools: op.ToolViews()}
	if out.Tools == nil {
		out.Tools = []fulfill.ToolView{}
	}
	writeJSON(w, http.StatusOK, out)
}

// PolicyInfo is the GET /v1/policy body.
type PolicyInfo struct {
	Revision    string   `json:"revision"`
	Files       []string `json:"files"`
	Default     bool     `json:"default"`
	ReloadError string   `json:"last_reload_error,omitempty"`
}

func (h *Handler) policy(w http.ResponseWriter, _ *http.Request) {
	_, pol, _ := h.opts.Source.get()
	if pol == nil {
		writeError(w, http.StatusServiceUnavailable, "no policy loaded")
		return
	}
	out := PolicyInfo{Revision: pol.Revision(), Files: pol.Files(), Default: pol.IsDefault()}
	if out.Files == nil {
		out.Files = []string{}
	}
	if err := pol.LastReloadError(); err != nil {
		out.ReloadError = err.Error()
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
