package space

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/mewkit/fulfiller/agent"
)

// The reference gateway's HTTP endpoints, served on the WebSocket port.

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	b, err := marshal(v)
	if err != nil {
		b = []byte(`{"error":"internal"}`)
	}
	_, _ = w.Write(b)
}

type health struct {
	Status   string   `json:"status"`
	Spaces   int      `json:"spaces"`
	Clients  int      `json:"clients"`
	Uptime   float64  `json:"uptime"`
	Features []string `json:"features"`
}

// serveHealth answers GET /health like the reference: clients counts every
// session of every space, ghosts included.
func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	h := health{
		Status:   "ok",
		Spaces:   len(s.spaces),
		Uptime:   time.Since(s.started).Seconds(),
		Features: []string{"capabilities", "context", "validation", "http-io"},
	}
	for _, sp := range s.spaces {
		h.Clients += len(sp.members)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, h)
}

type participantStatus struct {
	ID           string          `json:"id"`
	Connected    bool            `json:"connected"`
	Capabilities json.RawMessage `json:"capabilities"`
}

// serveParticipants answers GET /participants?space=…. Like the reference,
// it only knows spaces named in the query: without one it looks for a space
// called "default".
func (s *Server) serveParticipants(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("space")
	if name == "" {
		name = "default"
	}
	list := []participantStatus{}
	s.mu.Lock()
	if sp := s.spaces[name]; sp != nil {
		for _, id := range sp.order {
			m := sp.members[id]
			list = append(list, participantStatus{ID: id, Connected: m.c.open(), Capabilities: m.caps.json})
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"participants": list})
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// servePost is POST /participants/{id}/messages: an envelope injected over
// HTTP on behalf of participant id, broadcast to the WebSocket participants
// of the space. Unlike frames on a socket it is not validated or
// normalised beyond the defaults for protocol, id, ts and from (the body
// wins, even for from), as in the reference.
func (s *Server) servePost(w http.ResponseWriter, r *http.Request) {
	// Like express.json() in front of the reference handler, the body is
	// parsed before anything else is looked at.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFrame))
	if err == nil {
		body, err = compactFrame(body)
	}
	if err != nil {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Error</title>\n</head>\n<body>\n<pre>SyntaxError: "+
			html.EscapeString(err.Error())+"</pre>\n</body>\n</html>\n")
		return
	}
	pid := r.PathValue("id")
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "Bearer ") {
		writeJSON(w, http.StatusUnauthorized, errorBody{Error: "Missing or invalid authorization header"})
		return
	}
	token := strings.TrimPrefix(auth, "Bearer ")
	spaceID := r.URL.Query().Get("space")
	if spaceID == "" {
		spaceID = s.cfg.SpaceID
	}
	caps, ok := s.postCaps(spaceID, pid, token)
	if !ok {
		writeJSON(w, http.StatusForbidden, errorBody{Error: "Invalid token for participant"})
		return
	}

	var buf [16]field
	fs, isObject := splitObject(body, buf[:0])
	if !isObject {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "Request body must be a JSON object"})
		return
	}
	if kind, _ := stringValue(fs.get("kind")); strings.TrimSpace(kind) == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "Message kind is required"})
		return
	}

	status, answer := s.inject(spaceID, pid, caps, fs, time.Now())
	writeJSON(w, status, answer)
}

// inject routes an HTTP-posted envelope and returns the HTTP answer.
func (s *Server) inject(spaceID, pid string, caps *capSet, fs fields, now time.Time) (int, any) {
	kindRaw := fs.get("kind")
	kind, _ := stringValue(kindRaw)
	envelope := stamp(fs, pid, now, "http-", 6, false)
	final, _ := splitObject(envelope, nil)
	envID, ts := final.get("id"), final.get("ts")

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return http.StatusServiceUnavailable, errorBody{Error: "space closed"}
	}
	sp := s.spaceLocked(spaceID)
	// Errors also go to the participant's socket, if it has one here.
	notify := func(frame []byte) {
		if m := sp.members[pid]; m != nil {
			m.c.send(websocket.TextMessage, frame)
		}
	}
	if kind == "system/register" {
		notify(registerRefusedMsg(now, &pid, envID))
		return http.StatusBadRequest, errorBody{Error: "invalid_request", Message: registerRefusal}
	}
	if kind != "system/heartbeat" && !agent.Permits(caps.caps, kind, fs.get("payload")) {
		var yours []byte
		if m := sp.members[pid]; m != nil {
			yours = m.caps.json
		}
		notify(violationMsg(now, &pid, envID, kindRaw, yours))
		return http.StatusForbidden, errorBody{
			Error:   "capability_violation",
			Message: "Participant " + pid + " lacks capability for " + kind,
		}
	}
	s.broadcastLocked(sp, websocket.TextMessage, envelope, "")
	return http.StatusOK, map[string]json.RawMessage{
		"id":        envID,
		"status":    json.RawMessage(`"accepted"`),
		"timestamp": ts,
	}
}

// postCaps decides whether token may post as participant pid, and with
// which capabilities. The reference checks that the token is pid's own;
// Config does not say whose a token is, so any configured token is
// accepted, and so is the token pid joined this space with.
func (s *Server) postCaps(spaceID, pid, token string) (*capSet, bool) {
	if token == "" {
		return nil, false
	}
	if cs, ok := s.caps[token]; ok {
		return cs, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.spaces[spaceID]; sp != nil {
		if m := sp.members[pid]; m != nil && m.token == token {
			return m.caps, true
		}
	}
	return nil, false
}
