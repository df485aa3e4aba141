package inbox

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/httpserve"
)

//go:embed assets
var assets embed.FS

// CookieName is the name of the cookie the page's secret is kept in after
// the first visit, so that the address bar (and the history) loses it.
// Browsers share cookies across the ports of a host, so each inbox names
// its own (two approvers, or demo and approve, on one machine would
// otherwise log each other out): by a short hash of its secret, which
// tells nothing about it.
func (in *Inbox) CookieName() string {
	sum := sha256.Sum256([]byte("fulfiller inbox cookie\x00" + in.secret))
	return "fulfiller_inbox_" + hex.EncodeToString(sum[:4])
}

// heartbeat keeps idle event streams from being closed by proxies, and
// lets a page notice a dead inbox.
const heartbeat = 15 * time.Second

// Handler serves the page, its assets, the event stream (/events) and
// answers (POST /answer). Every request needs the secret, as ?token= or
// the cookie; a page opened with ?token= gets the cookie and is sent on
// to the same address without it.
func (in *Inbox) Handler() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /app.js", files)
	mux.Handle("GET /style.css", files)
	mux.HandleFunc("GET /events", in.events)
	mux.HandleFunc("POST /answer", in.answer)
	return in.guard(mux)
}

// guard checks the secret and sets the headers every response carries.
func (in *Inbox) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		if token := r.URL.Query().Get("token"); token != "" {
			if !in.secretIs(token) {
				unauthorized(w)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: in.CookieName(), Value: in.secret, Path: "/", HttpOnly: true,
				Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
			if r.Method == http.MethodGet && r.URL.Path == "/" {
				// Out of the address bar, the history and any screenshot.
				q := r.URL.Query()
				q.Del("token")
				u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
				http.Redirect(w, r, u.String(), http.StatusSeeOther)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		c, err := r.Cookie(in.CookieName())
		if err != nil || !in.secretIs(c.Value) {
			unauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (in *Inbox) secretIs(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), []byte(in.secret)) == 1
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintln(w, "401 unauthorized: open the address `fulfiller approve --web` printed; it carries the inbox's secret")
}

// events is the page's live feed (Server-Sent Events): a snapshot of every
// card, then each change.
func (in *Inbox) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	s, snap, err := in.subscribe()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer in.unsubscribe(s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	writeEvent(w, sseEvent{name: "snapshot", data: snap})
	flusher.Flush()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			// Dropped (too slow): the page reconnects to a fresh
			// snapshot. Closed: the client is stopping, and a page left
			// retrying would say "reconnecting…" forever; it is told.
			if in.isClosed() {
				writeEvent(w, sseEvent{name: "bye", data: []byte(`{"reason":"stopped"}`)})
				flusher.Flush()
			}
			return
		case ev := <-s.ch:
			writeEvent(w, ev)
			for more := true; more; {
				select {
				case ev := <-s.ch:
					writeEvent(w, ev)
				default:
					more = false
				}
			}
			flusher.Flush()
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		}
	}
}

type sseEvent struct {
	name string
	data []byte // JSON: one line
}

func writeEvent(w http.ResponseWriter, ev sseEvent) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
}

// subscriber is one page's event stream.
type subscriber struct {
	ch   chan sseEvent
	done chan struct{}
}

// subscriberQueue is how many events a page may lag behind before it is
// dropped (and reconnects to a fresh snapshot).
const subscriberQueue = 256

func newSubscriber() *subscriber {
	return &subscriber{ch: make(chan sseEvent, subscriberQueue), done: make(chan struct{})}
}

func (s *subscriber) offer(ev sseEvent) bool {
	select {
	case s.ch <- ev:
		return true
	default:
		return false
	}
}

// close is called once, with the inbox's lock held.
func (s *subscriber) close() { close(s.done) }

// answerRequest is what the page posts when the person answers a card.
type answerRequest struct {
	ID     string `json:"id"`     // the card's request id
	Action string `json:"action"` // approve, decline, delegate or dismiss
	Reason string `json:"reason"`
	// Edits are the editable arguments the person changed, by name; an
	// approval only.
	Edits      map[string]json.RawMessage `json:"edits"`
	DelegateTo string                     `json:"delegate_to"`
	// Grant, with an approval, is how long to allow calls like this one:
	// one of the card's grant offers.
	Grant string `json:"grant"`
}

// maxReason bounds a reason typed on the page: it travels in an
// elicitation answer and a chat to the proposer.
const maxReason = 2000

// answer takes a person's answer from the page. It is a JSON POST from the
// page's own origin: a form on another site can neither send that content
// type without the browser asking first, nor carry the SameSite cookie.
func (in *Inbox) answer(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "answers come from the inbox's own page")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, "want application/json")
		return
	}
	var req answerRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "answer: "+err.Error())
		return
	}
	card, ok := in.card(req.ID)
	if !ok {
		writeError(w, http.StatusConflict, ErrNotOpen.Error())
		return
	}
	a, err := req.answer(card)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := in.Answer(req.ID, a); err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]string{"answer": a.Describe()})
}

// sameOrigin reports whether a state-changing request comes from the
// inbox's own page: the browser's Origin (or, failing that, its
// Sec-Fetch-Site) must say so. Requests without either are not from a
// browser page and the secret alone vouches for them.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// answer turns the page's request into the client's Answer, checked
// against what the card offers: the terminal card's rules, in one place
// for every page.
func (req answerRequest) answer(c *approver.Card) (approver.Answer, error) {
	reason := strings.TrimSpace(req.Reason)
	if len(reason) > maxReason {
		return approver.Answer{}, fmt.Errorf("the reason is longer than %d bytes", maxReason)
	}
	if len(req.Edits) > 0 && req.Action != "approve" {
		return approver.Answer{}, errors.New("edits come only with an approval")
	}
	if req.Grant != "" && (req.Action != "approve" || c.Grant == nil || !slices.Contains(c.Grant.Offers, req.Grant)) {
		return approver.Answer{}, fmt.Errorf("%w: %q", approver.ErrGrantNotOffered, req.Grant)
	}
	switch req.Action {
	case "approve":
		if c.Proposal != nil && !c.DigestOK {
			return approver.Answer{}, approver.ErrDigestMismatch
		}
		edits, err := approver.CheckEdits(c, req.Edits)
		if err != nil {
			return approver.Answer{}, err
		}
		return approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: reason, Edits: edits, Grant: req.Grant}, nil
	case "decline":
		if reason == "" {
			return approver.Answer{Action: approval.ActionDecline}, nil
		}
		// MCP's decline carries no content: a reason for the proposer
		// travels as an accept that does not approve.
		return approver.Answer{Action: approval.ActionAccept, Reason: reason}, nil
	case "delegate":
		if !slices.Contains(c.Delegates, req.DelegateTo) {
			return approver.Answer{}, fmt.Errorf("%q is not an approver this prompt may be handed to", req.DelegateTo)
		}
		return approver.Answer{Action: approval.ActionAccept, DelegateTo: req.DelegateTo}, nil
	case "dismiss":
		return approver.Answer{Action: approval.ActionCancel}, nil
	}
	return approver.Answer{}, fmt.Errorf("unknown action %q: want approve, decline, delegate or dismiss", req.Action)
}

// Serve serves the inbox on ln until ctx ends, over TLS when certFile
// and keyFile are given. At the end it closes the inbox: open pages see
// their stream end.
func (in *Inbox) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	srv := &http.Server{Handler: in.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(in.log.Handler(), slog.LevelDebug)}
	// Closed first when ctx ends, so that open pages' streams end and
	// the shutdown does not wait for them.
	stop := context.AfterFunc(ctx, in.Close)
	defer stop()
	err := httpserve.Serve(ctx, srv, ln, certFile, keyFile)
	in.Close()
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	return nil
}
