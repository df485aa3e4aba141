package space

import (
	"bytes"
	"strconv"
	"time"

	"github.com/gorilla/websocket"

	"github.com/mewkit/fulfiller/agent"
)

// space is one MEW space: who is in it, in join order, which is the order
// the reference gateway lists participants and delivers frames in.
type space struct {
	id      string
	order   []string
	members map[string]*member
}

// member is a participant id's session: the socket it was last joined on
// and the capabilities it got then. Sessions are keyed by id, not socket,
// which is what makes the reference's duplicate-id quirks come out the same.
type member struct {
	c     *conn
	caps  *capSet
	token string // for HTTP posts on the member's behalf
}

func (sp *space) set(id string, m *member) {
	if _, ok := sp.members[id]; !ok {
		sp.order = append(sp.order, id)
	}
	sp.members[id] = m
}

func (sp *space) remove(id string) {
	if _, ok := sp.members[id]; !ok {
		return
	}
	delete(sp.members, id)
	for i, x := range sp.order {
		if x == id {
			sp.order = append(sp.order[:i], sp.order[i+1:]...)
			break
		}
	}
}

// spaceLocked returns the space with this id, creating it on first use.
func (s *Server) spaceLocked(id string) *space {
	sp := s.spaces[id]
	if sp == nil {
		sp = &space{id: id, members: make(map[string]*member)}
		s.spaces[id] = sp
	}
	return sp
}

// broadcastLocked queues a frame to every open socket of the space, in join
// order, skipping the session named except (presence joins go to the
// others). A socket joined under two ids gets the frame twice, as in the
// reference. The tap has the frame before any socket: a test that saw a
// participant receive it finds it recorded.
func (s *Server) broadcastLocked(sp *space, typ int, frame []byte, except string) {
	s.tapLocked(sp, frame)
	for _, id := range sp.order {
		if id == except {
			continue
		}
		sp.members[id].c.send(typ, frame)
	}
}

// isStreamFrame reports whether a frame is stream data (#<stream-id>#…),
// which the gateway relays instead of parsing.
func isStreamFrame(b []byte) bool {
	return len(b) > 1 && b[0] == '#' && bytes.IndexByte(b[1:], '#') >= 0
}

// handleFrame is the reference gateway's message handler: stream data,
// parse, validate, join, system/register, capability check, normalise,
// broadcast, in that order.
func (s *Server) handleFrame(c *conn, data []byte) {
	now := time.Now()
	if isStreamFrame(data) {
		s.mu.Lock()
		if c.sp != nil {
			s.broadcastLocked(c.sp, websocket.BinaryMessage, data, "")
		}
		s.mu.Unlock()
		return
	}

	compact, err := compactFrame(data)
	if err != nil {
		s.sendDirect(c, bareErrorMsg(err.Error(), codeProcessing))
		return
	}
	var buf [16]field
	fs, isObject := splitObject(compact, buf[:0])
	if !isObject && compact[0] != '[' {
		s.sendDirect(c, bareErrorMsg("Message must be an object", codeValidation))
		return
	}
	// A top-level array is an object without fields to the reference's
	// checks (see the package doc), so fs stays empty for it.

	if p := fs.get("protocol"); truthy(p) {
		if v, _ := stringValue(p); v != agent.ProtocolV04 && v != agent.ProtocolV03 {
			s.sendDirect(c, bareErrorMsg("Invalid protocol version: "+jsText(p), codeValidation))
			return
		}
	}
	kindRaw := fs.get("kind")
	kind, _ := stringValue(kindRaw)
	payload := fs.get("payload")
	switch {
	case kind == agent.KindChat && !truthy(objectField(payload, "text")):
		s.sendDirect(c, bareErrorMsg("Chat message requires payload.text", codeValidation))
		return
	case kind == agent.KindRequest && !truthy(objectField(payload, "method")):
		s.sendDirect(c, bareErrorMsg("MCP request requires payload.method", codeValidation))
		return
	}

	if typ, _ := stringValue(fs.get("type")); kind == "system/join" || typ == "join" {
		s.join(c, fs, now)
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	var to *string
	if c.sp != nil {
		to = &c.id
	}
	if kind == "system/register" {
		c.send(websocket.TextMessage, registerRefusedMsg(now, to, fs.get("id")))
		return
	}
	var caps *capSet
	if c.sp != nil {
		if m := c.sp.members[c.id]; m != nil {
			caps = m.caps
		}
	}
	if kind != "system/heartbeat" && (caps == nil || !agent.Permits(caps.caps, kind, payload)) {
		var capsJSON []byte
		if caps != nil {
			capsJSON = caps.json
		}
		c.send(websocket.TextMessage, violationMsg(now, to, fs.get("id"), kindRaw, capsJSON))
		return
	}
	if c.sp == nil {
		return // a heartbeat before the join: allowed, but there is no space to hear it
	}
	s.broadcastLocked(c.sp, websocket.TextMessage, normalise(fs, c.id, now), "")
}

// sendDirect queues a frame for one socket only.
func (s *Server) sendDirect(c *conn, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.send(websocket.TextMessage, frame)
}

// join registers the socket under the id it asks for: welcome to the
// socket, presence join to everyone else in the space.
func (s *Server) join(c *conn, fs fields, now time.Time) {
	payload := fs.get("payload")
	pick := func(key string) string {
		if v := nonEmptyString(fs.get(key)); v != "" {
			return v
		}
		return nonEmptyString(objectField(payload, key))
	}
	id := pick("participantId")
	if id == "" {
		id = "participant-" + strconv.FormatInt(now.UnixMilli(), 10)
	}
	spaceID := pick("space")
	if spaceID == "" {
		spaceID = s.cfg.SpaceID
	}
	token := pick("token")
	caps := s.capsFor(token)

	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spaceLocked(spaceID)
	sp.set(id, &member{c: c, caps: caps, token: token})
	c.id, c.sp = id, sp

	others := make([]participantInfo, 0, len(sp.order)-1)
	for _, pid := range sp.order {
		if pid != id {
			others = append(others, participantInfo{ID: pid, Capabilities: sp.members[pid].caps.json})
		}
	}
	you := participantInfo{ID: id, Capabilities: caps.json}
	c.send(websocket.TextMessage, welcomeMsg(now, you, others))
	s.broadcastLocked(sp, websocket.TextMessage, presenceMsg(now, "join", you), id)
	s.log.Debug("space: joined", "id", id, "space", spaceID)
}

// leaveLocked ends the session of the socket's latest id, whichever socket
// that session is on now, and tells the space. Like the reference, it does
// so even when the session was already gone, and ids from earlier joins on
// the same socket stay behind as ghosts.
func (s *Server) leaveLocked(c *conn) {
	if c.sp == nil || c.left {
		return
	}
	c.left = true // once per socket: DropAll may have done it already
	c.sp.remove(c.id)
	s.broadcastLocked(c.sp, websocket.TextMessage, presenceMsg(time.Now(), "leave", participantInfo{ID: c.id}), "")
	s.log.Debug("space: left", "id", c.id, "space", c.sp.id)
}
