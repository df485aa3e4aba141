package teaminbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/printable"
)

// Options configure a Server.
type Options struct {
	Dir    string // enrolments, passkeys and approver tokens (see PasskeysFile)
	RPID   string // WebAuthn relying party id: the inbox's host name
	Origin string // the inbox's origin as browsers see it, e.g. https://inbox.example.com
	// Enrolled is called (synchronously) after an approver enrolled, so
	// that the caller can join the space for them.
	Enrolled func(approver string)
	// Approvers, when not empty, are the only approvers who may enrol,
	// sign in and be joined (--approver-directory): an enrolment link for
	// anyone else is refused even if someone made one.
	Approvers []string
	Logger    *slog.Logger     // [discard]
	Now       func() time.Time // [time.Now]
}

// How long things last.
const (
	ceremonyTTL = 5 * time.Minute // a WebAuthn ceremony, begin to finish
	sessionTTL  = 12 * time.Hour  // a signed-in browser
	cookieName  = "fulfiller_team_inbox"
	maxBody     = 64 << 10
)

// Server is the team inbox: HTTP for the browsers, and an approver.UI per
// enrolled approver for the approver.Client that joins the space as them.
type Server struct {
	opts Options
	log  *slog.Logger

	mu            sync.Mutex
	passkeys      approval.Passkeys
	passkeysStamp fileStamp           // the passkeys file as last read
	ceremonies    map[string]ceremony // enrolments and answers, by random id
	// ceremonyQueue is the ids of ceremonies in the order they were made
	// (and expire); usedLogins the sign-in ceremonies that finished, until
	// they expire, in usedQueue's order. loginKey authenticates sign-in
	// ceremony ids, which hold their own state.
	ceremonyQueue []queued
	usedLogins    map[string]struct{}
	usedQueue     []queued
	loginKey      []byte
	sessions      map[string]session    // by cookie value
	uis           map[string]*UI        // by approver id
	onEnrol       func(approver string) // Run's: join the space for them

	// tamper, in tests, changes an answer after its assertion was made:
	// what a compromised inbox server would try.
	tamper func(*approver.Answer)
}

type ceremony struct {
	kind      string // "enrol", "login", "answer"
	challenge string // base64url, as clientDataJSON carries it
	approver  string
	token     string          // enrol: the enrolment token, used up at finish
	requestID string          // answer: the card
	answer    approver.Answer // answer: what the assertion must cover
	expires   time.Time
}

type session struct {
	approver string
	// credential is the passkey the approver had when the session began:
	// a session lasts only while it is still theirs, so a re-enrolment
	// (a lost device replaced) or `inbox revoke` ends every session.
	credential []byte
	expires    time.Time
}

// New makes a Server and reads the passkeys enrolled so far.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := approval.CheckRelyingParty(opts.RPID, opts.Origin); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	keys, err := LoadPasskeys(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := SweepEnrolments(opts.Dir, opts.Now()); err != nil {
		return nil, err
	}
	loginKey := make([]byte, 32)
	if _, err := rand.Read(loginKey); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, passkeys: keys, ceremonies: map[string]ceremony{}, sessions: map[string]session{}, uis: map[string]*UI{},
		usedLogins: map[string]struct{}{}, loginKey: loginKey}
	s.passkeysStamp = s.stampPasskeys()
	return s, nil
}

// stampPasskeys is what the passkeys file is now, to tell a change
// another process made (a re-enrolment by another inbox on the same
// directory, `inbox revoke`): every write renames a new file into place.
func (s *Server) stampPasskeys() fileStamp {
	fi, err := os.Stat(filepath.Join(s.opts.Dir, PasskeysFile))
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{fi}
}

// fileStamp tells one version of a file from another: the same file
// (device and inode), size and modification time.
type fileStamp struct{ fi os.FileInfo }

func (a fileStamp) same(b fileStamp) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil
	}
	return os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime())
}

// reloadPasskeys reads the passkeys file again when it changed since it
// was last read; s.mu must be held. A file that cannot be read keeps
// the passkeys in force (and is logged).
func (s *Server) reloadPasskeys() {
	stamp := s.stampPasskeys()
	if stamp.same(s.passkeysStamp) {
		return
	}
	keys, err := LoadPasskeys(s.opts.Dir)
	if err != nil {
		s.log.Warn("the passkeys file changed and cannot be read; the passkeys in force stay", "err", err)
		return
	}
	s.passkeys, s.passkeysStamp = keys, stamp
}

// Enrolled lists the approvers with a passkey, sorted.
func (s *Server) Enrolled() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return approval.ApproverKeys{Passkeys: s.passkeys}.IDs()
}

// UI is the face of one approver's client: the cards addressed to them.
// Get one with Server.UI.
func (s *Server) UI(approverID string) *UI {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.uis[approverID]
	if u == nil {
		u = &UI{approver: approverID, cards: map[string]*entry{}}
		s.uis[approverID] = u
	}
	return u
}

// Handler serves the page and its JSON API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /enrol", s.page)
	mux.HandleFunc("GET /app.js", asset("text/javascript", appJS))
	mux.HandleFunc("GET /app.css", asset("text/css", appCSS))
	mux.HandleFunc("GET /icon.svg", asset("image/svg+xml", iconSVG))
	mux.HandleFunc("GET /api/session", s.session)
	mux.HandleFunc("POST /api/enrol/check", s.post(s.enrolCheck))
	mux.HandleFunc("POST /api/enrol/begin", s.post(s.enrolBegin))
	mux.HandleFunc("POST /api/enrol/finish", s.post(s.enrolFinish))
	mux.HandleFunc("POST /api/login/begin", s.post(s.loginBegin))
	mux.HandleFunc("POST /api/login/finish", s.post(s.loginFinish))
	mux.HandleFunc("POST /api/logout", s.post(s.logout))
	mux.HandleFunc("GET /api/cards", s.cards)
	mux.HandleFunc("POST /api/answer/begin", s.post(s.answerBegin))
	mux.HandleFunc("POST /api/answer/finish", s.post(s.answerFinish))
	return securityHeaders(mux)
}

//go:embed assets/index.html
var indexHTML []byte

//go:embed assets/app.js
var appJS []byte

//go:embed assets/app.css
var appCSS []byte

// iconSVG is the page's icon (index.html links it): without one the
// browser asks for /favicon.ico and logs the 404 in the console.
//
//go:embed assets/icon.svg
var iconSVG []byte

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(indexHTML)
}

func asset(ctype string, b []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(b)
	}
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// httpError is an API failure: status and a sentence for the person.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func fail(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// post wraps a JSON API call: same-origin only (the Origin header must be
// the inbox's: a cross-site page can neither read nor make these calls),
// a bounded JSON body in, JSON out.
func (s *Server) post(f func(r *http.Request, in json.RawMessage) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != s.opts.Origin {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused"})
			return
		}
		var in json.RawMessage
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&in); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body is not JSON"})
			return
		}
		out, err := f(withWriter(w, r), in)
		var he *httpError
		switch {
		case errors.As(err, &he):
			if he.status == http.StatusForbidden || he.status == http.StatusUnauthorized {
				// Refusals are what an attack looks like (a used link, a
				// passkey that does not verify, another's card): the
				// operator sees them. The message never holds a token.
				s.log.Warn("team inbox refused a request", "path", r.URL.Path, "status", he.status, "approver", s.sessionOf(r), "why", he.msg)
			}
			writeJSON(w, he.status, map[string]string{"error": he.msg})
		case err != nil:
			s.log.Error("team inbox request failed", "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		default:
			writeJSON(w, http.StatusOK, out)
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxCeremonies bounds the enrolment and answer ceremonies kept at once
// (both need a link or a session to begin); past it the oldest goes.
const maxCeremonies = 4096

// queued is a ceremony id (or a used sign-in's) in the order it was
// made: with one TTL for all, also the order they expire in, so that
// expiry pops from the front, O(1) each.
type queued struct {
	id      string
	expires time.Time
}

// newCeremony records a ceremony and returns its id. A sign-in's is kept
// nowhere but in the id itself (loginCeremony): /api/login/begin needs no
// credential, and whatever it kept a flood could fill.
func (s *Server) newCeremony(c ceremony) string {
	now := s.opts.Now()
	c.expires = now.Add(ceremonyTTL)
	if c.kind == "login" {
		return s.loginCeremony(c)
	}
	id := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireCeremonies(now)
	for len(s.ceremonies) >= maxCeremonies && len(s.ceremonyQueue) > 0 {
		delete(s.ceremonies, s.ceremonyQueue[0].id)
		s.ceremonyQueue = s.ceremonyQueue[1:]
	}
	s.ceremonies[id] = c
	s.ceremonyQueue = append(s.ceremonyQueue, queued{id, c.expires})
	return id
}

// expireCeremonies forgets the ceremonies and used sign-ins that expired
// by now, from the front of their queues; s.mu must be held.
func (s *Server) expireCeremonies(now time.Time) {
	for len(s.ceremonyQueue) > 0 && !now.Before(s.ceremonyQueue[0].expires) {
		delete(s.ceremonies, s.ceremonyQueue[0].id)
		s.ceremonyQueue = s.ceremonyQueue[1:]
	}
	for len(s.usedQueue) > 0 && !now.Before(s.usedQueue[0].expires) {
		delete(s.usedLogins, s.usedQueue[0].id)
		s.usedQueue = s.usedQueue[1:]
	}
}

// loginCeremony is a sign-in ceremony's id: the approver, the challenge
// and the expiry, authenticated with the server's key (HMAC-SHA256), so
// that the server keeps nothing until the sign-in finishes.
func (s *Server) loginCeremony(c ceremony) string {
	payload := binary.BigEndian.AppendUint64(nil, uint64(c.expires.UnixNano()))
	payload = append(payload, mustDecode(c.challenge)...)
	payload = append(payload, c.approver...)
	mac := hmac.New(sha256.New, s.loginKey)
	mac.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// loginOf reads a sign-in ceremony's id; ok is false when it is not one
// this server made.
func (s *Server) loginOf(id string) (c ceremony, ok bool) {
	p, m, found := strings.Cut(id, ".")
	if !found {
		return ceremony{}, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	sum, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || len(payload) < 8+32 {
		return ceremony{}, false
	}
	mac := hmac.New(sha256.New, s.loginKey)
	mac.Write(payload)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return ceremony{}, false
	}
	return ceremony{kind: "login", expires: time.Unix(0, int64(binary.BigEndian.Uint64(payload))),
		challenge: base64.RawURLEncoding.EncodeToString(payload[8 : 8+32]), approver: string(payload[8+32:])}, true
}

// takeCeremony uses a ceremony up: each challenge is answered once. A
// sign-in's is used up by spendLogin, once its assertion verified.
func (s *Server) takeCeremony(id, kind string) (ceremony, error) {
	expired := fail(http.StatusBadRequest, "the request expired or was already used; start again")
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireCeremonies(now)
	if c, ok := s.loginOf(id); ok {
		if _, used := s.usedLogins[id]; used || c.kind != kind || !now.Before(c.expires) {
			return ceremony{}, expired
		}
		return c, nil
	}
	c, ok := s.ceremonies[id]
	delete(s.ceremonies, id)
	if !ok || c.kind != kind || !now.Before(c.expires) {
		return ceremony{}, expired
	}
	return c, nil
}

// spendLogin records that the sign-in ceremony id finished: it is never
// taken again before it expires. Only sign-ins whose passkey verified
// get here, so the record is as bounded as real sign-ins are.
func (s *Server) spendLogin(id string, c ceremony) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, used := s.usedLogins[id]; used {
		return fail(http.StatusBadRequest, "the request expired or was already used; start again")
	}
	s.usedLogins[id] = struct{}{}
	s.usedQueue = append(s.usedQueue, queued{id, c.expires})
	return nil
}

// sessionOf returns the signed-in approver of the request, or "".
func (s *Server) sessionOf(r *http.Request) string {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadPasskeys()
	for id, se := range s.sessions {
		if subtle.ConstantTimeCompare([]byte(id), []byte(ck.Value)) == 1 {
			pk, enrolled := s.passkeys[se.approver]
			switch {
			case !s.opts.Now().Before(se.expires):
				delete(s.sessions, id)
				return ""
			case !enrolled || !bytes.Equal(pk.CredentialID, se.credential):
				// Re-enrolled or revoked since: the session was the old
				// passkey's (perhaps a lost device's).
				delete(s.sessions, id)
				s.log.Info("a session of a replaced or revoked passkey ended", "approver", se.approver)
				return ""
			}
			return se.approver
		}
	}
	return ""
}

func (s *Server) signIn(w http.ResponseWriter, approverID string) {
	id := randomID()
	s.mu.Lock()
	s.sessions[id] = session{approver: approverID, credential: s.passkeys[approverID].CredentialID, expires: s.opts.Now().Add(sessionTTL)}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.secure(), MaxAge: int(sessionTTL / time.Second)})
}

func (s *Server) secure() bool { return strings.HasPrefix(s.opts.Origin, "https://") }

// endSessions ends every session of approver (a re-enrolment); s.mu
// must be held.
func (s *Server) endSessions(approver string) {
	for id, se := range s.sessions {
		if se.approver == approver {
			delete(s.sessions, id)
		}
	}
}

// logout ends the request's session and clears its cookie.
func (s *Server) logout(r *http.Request, _ json.RawMessage) (any, error) {
	if ck, err := r.Cookie(cookieName); err == nil {
		s.mu.Lock()
		for id := range s.sessions {
			if subtle.ConstantTimeCompare([]byte(id), []byte(ck.Value)) == 1 {
				delete(s.sessions, id)
			}
		}
		s.mu.Unlock()
	}
	http.SetCookie(writerOf(r), &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.secure(), MaxAge: -1})
	return map[string]bool{"signed_out": true}, nil
}

// responseWriterKey lets API calls that sign in set the cookie.
type responseWriterKey struct{}

func (s *Server) rp() protocol.RelyingPartyEntity {
	return protocol.RelyingPartyEntity{ID: s.opts.RPID, CredentialEntity: protocol.CredentialEntity{Name: "fulfiller team inbox"}}
}

// --- enrolment ---

type enrolBeginIn struct {
	Token string `json:"token"`
}

// enrolCheck tells the enrolment page whom its link enrols, without
// using the link up, so that the page names the approver before the
// button and says at once that a used, expired or withdrawn link is one
// (not only when the button is pressed). It answers 200 either way: a
// link that does not work is what the page shows, not a failed request
// in the browser's console. The operator sees the refusal in the log,
// as at enrolBegin.
func (s *Server) enrolCheck(r *http.Request, raw json.RawMessage) (any, error) {
	var in enrolBeginIn
	_ = json.Unmarshal(raw, &in)
	who, err := lookupEnrolment(s.opts.Dir, in.Token, s.opts.Now())
	if err == nil && !s.allowed(who) {
		s.log.Warn("an enrolment link for an approver not in the approver directory was refused", "approver", who)
		err = ErrEnrolment
	}
	if err != nil {
		s.log.Warn("team inbox refused a request", "path", r.URL.Path, "why", err.Error())
		return map[string]any{"valid": false, "error": err.Error()}, nil
	}
	return map[string]any{"valid": true, "approver": who}, nil
}

func (s *Server) enrolBegin(r *http.Request, raw json.RawMessage) (any, error) {
	var in enrolBeginIn
	_ = json.Unmarshal(raw, &in)
	who, err := lookupEnrolment(s.opts.Dir, in.Token, s.opts.Now())
	if err != nil {
		return nil, fail(http.StatusForbidden, "%v", err)
	}
	if !s.allowed(who) {
		s.log.Warn("an enrolment link for an approver not in the approver directory was refused", "approver", who)
		return nil, fail(http.StatusForbidden, "%v", ErrEnrolment)
	}
	challenge := randomID()
	id := s.newCeremony(ceremony{kind: "enrol", challenge: challenge, approver: who, token: in.Token})
	return map[string]any{"ceremony": id, "approver": who, "publicKey": protocol.PublicKeyCredentialCreationOptions{
		RelyingParty: s.rp(),
		User:         protocol.UserEntity{ID: []byte(who), DisplayName: who, CredentialEntity: protocol.CredentialEntity{Name: who}},
		Challenge:    mustDecode(challenge),
		Parameters: []protocol.CredentialParameter{
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgES256},
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgEdDSA},
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgRS256},
		},
		Timeout:     int(ceremonyTTL / time.Millisecond),
		Attestation: protocol.PreferNoAttestation,
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementPreferred, UserVerification: protocol.VerificationPreferred,
		},
	}}, nil
}

func mustDecode(s string) []byte {
	b, _ := base64.RawURLEncoding.DecodeString(s)
	return b
}

type finishIn struct {
	Ceremony   string          `json:"ceremony"`
	Credential json.RawMessage `json:"credential"`
}

func (s *Server) enrolFinish(r *http.Request, raw json.RawMessage) (any, error) {
	var in finishIn
	_ = json.Unmarshal(raw, &in)
	c, err := s.takeCeremony(in.Ceremony, "enrol")
	if err != nil {
		return nil, err
	}
	pcc, err := protocol.ParseCredentialCreationResponseBytes(in.Credential)
	if err != nil {
		return nil, fail(http.StatusBadRequest, "the passkey's answer could not be read")
	}
	params := []protocol.CredentialParameter{
		{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgES256},
		{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgEdDSA},
		{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgRS256},
	}
	if _, err := pcc.Verify(c.challenge, s.opts.RPID, []string{s.opts.Origin}, nil, nil, protocol.TopOriginImplicitVerificationMode,
		false, false, true, nil, params, protocol.AttestationPolicy{}, protocol.SignaturePolicy{}); err != nil {
		return nil, fail(http.StatusBadRequest, "the passkey could not be enrolled: %s", errText(err))
	}
	who, err := useEnrolment(s.opts.Dir, c.token, s.opts.Now())
	if err != nil {
		return nil, fail(http.StatusForbidden, "%v", err)
	}
	pk := approval.Passkey{RPID: s.opts.RPID, Origin: s.opts.Origin, CredentialID: pcc.RawID,
		PublicKey: pcc.Response.AttestationObject.AuthData.AttData.CredentialPublicKey}
	if err := appendPasskey(s.opts.Dir, who, pk); err != nil {
		return nil, fmt.Errorf("record the passkey: %w", err)
	}
	s.mu.Lock()
	s.passkeys[who] = pk
	s.passkeysStamp = s.stampPasskeys()
	s.endSessions(who) // the old passkey's sessions (a lost device) end
	s.mu.Unlock()
	s.log.Info("passkey enrolled", "approver", who)
	if s.opts.Enrolled != nil {
		s.opts.Enrolled(who)
	}
	s.mu.Lock()
	join := s.onEnrol
	s.mu.Unlock()
	if join != nil {
		join(who)
	}
	s.signIn(writerOf(r), who)
	line := fmt.Sprintf("%s %s %s", who, approval.KeyTypeWebAuthn, approval.EncodePasskey(pk))
	return map[string]string{"approver": who, "keys_line": line}, nil
}

func errText(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Details != "" {
		return pe.Details
	}
	return err.Error()
}

// --- sign-in ---

type loginBeginIn struct {
	Approver string `json:"approver"`
}

func (s *Server) allow(approverID string) ([]protocol.CredentialDescriptor, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadPasskeys()
	pk, ok := s.passkeys[approverID]
	if !ok {
		return nil, false
	}
	return []protocol.CredentialDescriptor{{Type: protocol.PublicKeyCredentialType, CredentialID: pk.CredentialID}}, true
}

func (s *Server) requestOptions(challenge, approverID string) (protocol.PublicKeyCredentialRequestOptions, bool) {
	allow, ok := s.allow(approverID)
	return protocol.PublicKeyCredentialRequestOptions{
		Challenge: mustDecode(challenge), Timeout: int(ceremonyTTL / time.Millisecond), RelyingPartyID: s.opts.RPID,
		AllowedCredentials: allow, UserVerification: protocol.VerificationPreferred,
	}, ok
}

func (s *Server) loginBegin(r *http.Request, raw json.RawMessage) (any, error) {
	var in loginBeginIn
	_ = json.Unmarshal(raw, &in)
	challenge := randomID()
	opts, ok := s.requestOptions(challenge, in.Approver)
	if !ok || !s.allowed(in.Approver) {
		return nil, fail(http.StatusForbidden, "%s has no passkey here: ask the operator for an enrolment link", in.Approver)
	}
	id := s.newCeremony(ceremony{kind: "login", challenge: challenge, approver: in.Approver})
	return map[string]any{"ceremony": id, "publicKey": opts}, nil
}

// verifyAssertion checks an assertion by approverID's passkey over
// challenge (base64url).
func (s *Server) verifyAssertion(approverID, challenge string, cred json.RawMessage) error {
	s.mu.Lock()
	s.reloadPasskeys()
	pk, ok := s.passkeys[approverID]
	s.mu.Unlock()
	if !ok {
		return fail(http.StatusForbidden, "no passkey for %s", approverID)
	}
	par, err := protocol.ParseCredentialRequestResponseBytes(cred)
	if err != nil {
		return fail(http.StatusBadRequest, "the passkey's answer could not be read")
	}
	if !bytes.Equal(par.RawID, pk.CredentialID) {
		return fail(http.StatusForbidden, "that is not %s's passkey", approverID)
	}
	if err := par.Verify(challenge, pk.RPID, "", []string{pk.Origin}, nil, nil, protocol.TopOriginImplicitVerificationMode,
		false, false, true, pk.PublicKey, protocol.SignaturePolicy{}); err != nil {
		return fail(http.StatusForbidden, "the passkey's signature does not verify: %s", errText(err))
	}
	return nil
}

func (s *Server) loginFinish(r *http.Request, raw json.RawMessage) (any, error) {
	var in finishIn
	_ = json.Unmarshal(raw, &in)
	c, err := s.takeCeremony(in.Ceremony, "login")
	if err != nil {
		return nil, err
	}
	if err := s.verifyAssertion(c.approver, c.challenge, in.Credential); err != nil {
		return nil, err
	}
	if err := s.spendLogin(in.Ceremony, c); err != nil {
		return nil, err
	}
	s.signIn(writerOf(r), c.approver)
	return map[string]string{"approver": c.approver}, nil
}

// --- cards and answers ---

// session says who the request's session is ("" when signed out), with
// 200 either way: the page asks it at load, and a 401 there (as from
// /api/cards) is an error in the console of everyone not signed in yet.
func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"approver": s.sessionOf(r)})
}

func (s *Server) cards(w http.ResponseWriter, r *http.Request) {
	who := s.sessionOf(r)
	if who == "" {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "sign in with your passkey"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"approver": who, "cards": s.UI(who).view()})
}

// answerIn is what the page asks to send about one card: what
// approve --web's page sends, in the approver client's terms.
type answerIn struct {
	Request string `json:"request"` // the elicitation envelope id (card id)
	Action  string `json:"action"`  // accept, decline, cancel
	Approve bool   `json:"approve"`
	Reason  string `json:"reason"`
	// Edits are the editable arguments the approver changed, by name
	// (JSON values); an approval only.
	Edits map[string]json.RawMessage `json:"edits"`
	// DelegateTo hands the decision to another approver the card names.
	DelegateTo string `json:"delegate_to"`
	// Grant, with an approval, is how long to allow calls like this one:
	// one of the card's grant offers, sent back exactly.
	Grant string `json:"grant"`
}

// maxReason bounds a reason typed on the page: it travels in the answer
// and in a chat to the proposer.
const maxReason = 2000

// answerOf checks what the page asks to send against what the card
// offers, default deny: only an approval carries edits or a grant, only
// the form's editable fields with values of their type, only a delegate
// the card names, only a grant duration the card offers and only for the
// call as shown (the terms the approver read are the call's, not an
// edited one's). The page offers nothing else; a request that asks for
// more is refused here, before any passkey signs it.
func answerOf(card *approver.Card, in answerIn) (approver.Answer, error) {
	if len(in.Reason) > maxReason {
		return approver.Answer{}, fmt.Errorf("the reason is longer than %d bytes", maxReason)
	}
	switch in.Action {
	case approval.ActionAccept:
	case approval.ActionDecline, approval.ActionCancel:
		if in.Approve || in.Reason != "" || len(in.Edits) > 0 || in.DelegateTo != "" || in.Grant != "" {
			// A reason for the proposer travels as an accept that does
			// not approve: MCP's decline and cancel carry no content.
			return approver.Answer{}, fmt.Errorf("a %s carries no approval, reason, edits, delegate or grant", in.Action)
		}
		return approver.Answer{Action: in.Action}, nil
	default:
		return approver.Answer{}, fmt.Errorf("unknown action %q: want accept, decline or cancel", in.Action)
	}
	a := approver.Answer{Action: approval.ActionAccept, Approve: in.Approve, Reason: in.Reason}
	if in.DelegateTo != "" {
		if in.Approve || len(in.Edits) > 0 || in.Grant != "" {
			return approver.Answer{}, errors.New("a delegation carries no approval, edits or grant")
		}
		if !slices.Contains(card.Delegates, in.DelegateTo) {
			return approver.Answer{}, fmt.Errorf("%q is not an approver this card may be handed to", in.DelegateTo)
		}
		a.DelegateTo = in.DelegateTo
		return a, nil
	}
	if !in.Approve {
		if len(in.Edits) > 0 || in.Grant != "" {
			return approver.Answer{}, errors.New("edits and grants come only with an approval")
		}
		return a, nil // a refusal with a reason
	}
	if card.Proposal != nil && !card.DigestOK {
		return approver.Answer{}, approver.ErrDigestMismatch
	}
	if in.Grant != "" {
		switch {
		case card.Grant == nil:
			return approver.Answer{}, fmt.Errorf("%w: this card offers no grant", approver.ErrGrantNotOffered)
		case !slices.Contains(card.Grant.Offers, in.Grant):
			return approver.Answer{}, fmt.Errorf("%w: %q is not one of its durations (%s)", approver.ErrGrantNotOffered, in.Grant, strings.Join(card.Grant.Offers, ", "))
		case len(in.Edits) > 0:
			return approver.Answer{}, errors.New("a grant comes with an approval of the call as shown, not with edits")
		}
		a.Grant = in.Grant
	}
	edits, err := approver.CheckEdits(card, in.Edits)
	if err != nil {
		return approver.Answer{}, err
	}
	a.Edits = edits
	return a, nil
}

// answerBegin turns what the approver chose into the answer content and
// the challenge their passkey must sign: SHA-256 of the signed approval
// bytes for this card's envelope id and call digest.
func (s *Server) answerBegin(r *http.Request, raw json.RawMessage) (any, error) {
	who := s.sessionOf(r)
	if who == "" {
		return nil, fail(http.StatusUnauthorized, "sign in with your passkey")
	}
	var in answerIn
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a choice this server does not know is refused, never dropped
	if err := dec.Decode(&in); err != nil {
		return nil, fail(http.StatusBadRequest, "the answer is not readable: %v", err)
	}
	card := s.UI(who).open(in.Request)
	if card == nil {
		// Another approver's card is indistinguishable from none: either
		// way this session cannot answer it.
		return nil, fail(http.StatusForbidden, "no open card %s of yours", in.Request)
	}
	a, err := answerOf(card, in)
	if err != nil {
		return nil, fail(http.StatusBadRequest, "%v", err)
	}
	content, err := answerContent(card, a)
	if err != nil {
		return nil, fail(http.StatusBadRequest, "%v", err)
	}
	challenge, err := approval.PasskeyChallenge(card.RequestID, card.Proposal.Digest, a.Action, content)
	if err != nil {
		return nil, fail(http.StatusBadRequest, "%v", err)
	}
	opts, ok := s.requestOptions(challenge, who)
	if !ok {
		return nil, fail(http.StatusForbidden, "no passkey for %s", who)
	}
	id := s.newCeremony(ceremony{kind: "answer", challenge: challenge, approver: who, requestID: card.RequestID, answer: a})
	return map[string]any{"ceremony": id, "publicKey": opts, "digest": card.Proposal.Digest,
		"answer": printable.String(a.Describe())}, nil
}

// answerContent is the content the approver client will send for a (no
// signature yet), read back from approver.Response so that what is signed
// is exactly what is sent.
func answerContent(card *approver.Card, a approver.Answer) (json.RawMessage, error) {
	if card.Proposal == nil || card.Proposal.Digest == "" {
		return nil, approver.ErrCannotSign
	}
	env, err := approver.Response(card, a, nil)
	if err != nil {
		return nil, err
	}
	var p struct {
		Result struct {
			Content json.RawMessage `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return nil, err
	}
	return p.Result.Content, nil
}

// answerFinish takes the passkey's assertion and hands the answer, with
// the assertion as its signature, to the approver's client. The server
// checks the assertion too, so that a wrong one is refused here with a
// reason rather than ignored by the fulfiller; the fulfiller's check is
// the one that counts.
func (s *Server) answerFinish(r *http.Request, raw json.RawMessage) (any, error) {
	who := s.sessionOf(r)
	if who == "" {
		return nil, fail(http.StatusUnauthorized, "sign in with your passkey")
	}
	var in finishIn
	_ = json.Unmarshal(raw, &in)
	c, err := s.takeCeremony(in.Ceremony, "answer")
	if err != nil {
		return nil, err
	}
	if c.approver != who {
		return nil, fail(http.StatusForbidden, "that answer belongs to another approver's session")
	}
	if err := s.verifyAssertion(who, c.challenge, in.Credential); err != nil {
		return nil, err
	}
	a := c.answer
	var compact bytes.Buffer
	if err := json.Compact(&compact, in.Credential); err != nil {
		return nil, fail(http.StatusBadRequest, "the passkey's answer is not JSON")
	}
	a.Signature = compact.String()
	s.mu.Lock()
	tamper := s.tamper
	s.mu.Unlock()
	if tamper != nil {
		tamper(&a)
	}
	if !s.UI(who).deliver(c.requestID, a) {
		return nil, fail(http.StatusConflict, "the card is no longer open")
	}
	return map[string]string{"sent": a.Describe()}, nil
}

// writerOf returns the ResponseWriter the post wrapper stored for calls
// that set a cookie.
func writerOf(r *http.Request) http.ResponseWriter {
	w, _ := r.Context().Value(responseWriterKey{}).(http.ResponseWriter)
	return w
}

// withWriter stores w in the request's context for writerOf.
func withWriter(w http.ResponseWriter, r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), responseWriterKey{}, w))
}
