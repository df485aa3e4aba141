package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/mewkit/fulfiller/agent"
)

// wireProposer is a synthetic proposer on its own WebSocket. It speaks the
// wire directly instead of through agent.Client: the space broadcasts every
// frame to every participant, so with N proposers each frame is read N+2
// times, and decoding all of them fully made the load generator, not the
// fulfiller, the bottleneck of the first measurements. It writes prebuilt
// frames and reads only the few header fields it needs (see scan).
type wireProposer struct {
	id           string
	writeTimeout time.Duration // a space that stops reading cannot hold a sender forever
	ws           *websocket.Conn
	mu           sync.Mutex // one writer at a time
	frame        []byte     // the sender's buffer, reused for every proposal (under mu)
}

// dialProposer joins the space as id and waits for the welcome.
func dialProposer(ctx context.Context, url, id, token string, writeTimeout time.Duration) (*wireProposer, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, url, h)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %s dials %s: %w", id, url, err)
	}
	join, _ := json.Marshal(agent.JoinFrame{Type: "join", ParticipantID: id, Token: token})
	if err := ws.WriteMessage(websocket.TextMessage, join); err != nil {
		ws.Close()
		return nil, fmt.Errorf("loadtest: %s joins: %w", id, err)
	}
	stop := context.AfterFunc(ctx, func() { ws.Close() })
	defer stop()
	for {
		_, frame, err := ws.ReadMessage()
		if err != nil {
			ws.Close()
			return nil, fmt.Errorf("loadtest: %s waits for its welcome: %w", id, err)
		}
		env, err := agent.Decode(frame)
		if err == nil && env.Kind == agent.KindWelcome && env.AddressedTo(id) {
			return &wireProposer{id: id, ws: ws, writeTimeout: writeTimeout}, nil
		}
	}
}

// propose writes one mcp/proposal with the given id. The frame is built
// by appending to a reused buffer (ids and participant ids are plain
// ASCII, to is JSON-encoded), which keeps the generator's own garbage out
// of the fulfiller's GC figures.
func (p *wireProposer) propose(id string, to []string, payload json.RawMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := append(p.frame[:0], `{"protocol":"`+agent.ProtocolV04+`","id":"`...)
	b = append(b, id...)
	b = append(b, `","from":"`...)
	b = append(b, p.id...)
	b = append(b, '"')
	if len(to) > 0 {
		enc, err := json.Marshal(to)
		if err != nil {
			return err
		}
		b = append(b, `,"to":`...)
		b = append(b, enc...)
	}
	b = append(b, `,"kind":"`+agent.KindProposal+`","payload":`...)
	b = append(b, payload...)
	b = append(b, '}')
	p.frame = b
	_ = p.ws.SetWriteDeadline(time.Now().Add(p.writeTimeout))
	return p.ws.WriteMessage(websocket.TextMessage, b)
}

// run reads frames until the socket closes and records the answers to
// this proposer's proposals.
func (p *wireProposer) run(t *tracker, r *receiver) {
	var buf bytes.Buffer // reused: observe keeps nothing of the frame
	for {
		_, rd, err := p.ws.NextReader()
		if err != nil {
			return
		}
		buf.Reset()
		if _, err := buf.ReadFrom(rd); err != nil {
			return
		}
		r.observe(t, buf.Bytes())
	}
}

func (p *wireProposer) close() { _ = p.ws.Close() }

// scan returns the string value of the first "key":"…" in frame. The
// space delivers envelope keys in the order protocol, id, ts, from, then
// the sender's (agent.Encode writes to, kind, correlation_id before
// payload), so the first match of an envelope key is the envelope's own.
// Values with escapes are not unescaped; the ids and kinds this package
// looks at have none.
func scan(frame []byte, key string) []byte {
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return nil
	}
	v := frame[i+len(key):]
	j := bytes.IndexByte(v, '"')
	if j < 0 {
		return nil
	}
	return v[:j]
}

var (
	keyKind        = `"kind":"`
	keyID          = `"id":"`
	keyCorrelation = `"correlation_id":["`
	keyReason      = `"reason":"`
)

// observe handles one frame seen by the proposer.
func (r *receiver) observe(t *tracker, frame []byte) {
	now := t.now()
	switch string(scan(frame, keyKind)) {
	case agent.KindRequest:
		seq, ok := r.seq(scan(frame, keyCorrelation))
		if !ok {
			return
		}
		if lat, first := t.answered(seq, now); first {
			r.lat.record(lat)
			r.outcomes["fulfilled"]++
			id := string(scan(frame, keyID))
			r.requests[id] = seq
			r.fulfilling[seq] = id
		} else {
			r.duplicate("fulfilled")
		}
	case agent.KindReject:
		seq, ok := r.seq(scan(frame, keyCorrelation))
		if !ok {
			return
		}
		reason := string(scan(frame, keyReason))
		if id, ok := r.fulfilling[seq]; ok && reason == "timeout" {
			// The tool did not answer within --fulfill-timeout: the
			// fulfiller tells the proposer so (docs/design.md rule 4). A slow
			// tool, counted apart, not a second answer.
			delete(r.fulfilling, seq)
			delete(r.requests, id)
			r.fulfilTimeouts++
			t.release(seq)
			return
		}
		if lat, first := t.answered(seq, now); first {
			r.lat.record(lat)
			r.outcomes["rejected:"+reason]++
		} else {
			r.duplicate("rejected:" + reason)
		}
		t.release(seq)
	case agent.KindResponse:
		cid := scan(frame, keyCorrelation)
		seq, ok := r.requests[string(cid)]
		if !ok {
			return
		}
		delete(r.requests, string(cid))
		delete(r.fulfilling, seq)
		t.release(seq)
		r.toolLat.record(now - (t.sent[seq].Load() - 1))
		if bytes.Contains(frame, []byte(`"isError":true`)) || bytes.Contains(frame, []byte(`"error":{`)) {
			r.toolErrors++
		}
	}
}

// seq reads the sequence number from one of our proposal ids.
func (r *receiver) seq(id []byte) (int, bool) {
	s, ok := bytes.CutPrefix(id, []byte(r.prefix))
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(s))
	return n, err == nil
}
