package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A call its client's connection took (callDirect) is answered on the
// goroutine of the engine's Answer, as long as nothing had to hold it.
// What needs a goroutine to wait for the answer (the engine's Status or
// prompt, the progress tick of a call with a progressToken, the
// client's cancellation or departure) promotes it first: the hold that
// the SDK's handler runs for call then runs for it in a worker of the
// Front's, and its reply writes what the hold returns.

// watch arranges for h, a diverted call, to be promoted when its
// client cancels it or leaves, or when its first progress tick is due.
func (f *Front) watch(h *held) {
	stop := context.AfterFunc(h.ctx, func() { f.promote(h) })
	var tick *time.Timer
	if h.token != nil && f.cfg.ProgressEvery > 0 {
		tick = time.AfterFunc(f.cfg.ProgressEvery, func() { f.promote(h) })
	}
	h.mu.Lock()
	h.stopWatch, h.tick = stop, tick
	h.mu.Unlock()
}

// stopWatching stops what watch started.
func (h *held) stopWatching() {
	h.mu.Lock()
	stop, tick := h.stopWatch, h.tick
	h.stopWatch, h.tick = nil, nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	if tick != nil {
		tick.Stop()
	}
}

// claim takes a diverted call's answer for the caller (nothing promotes
// it after): false when it was promoted first, and its hold answers.
func (f *Front) claim(h *held) bool {
	h.mu.Lock()
	free := !h.holding
	h.holding = true
	h.mu.Unlock()
	h.stopWatching()
	return free
}

// promote holds h, a diverted call not yet answered or held, as call
// holds one: in a worker, whose result h's reply writes.
func (f *Front) promote(h *held) {
	h.mu.Lock()
	if h.reply == nil || h.holding || h.gone {
		h.mu.Unlock()
		return
	}
	h.holding = true
	ctx := h.ctx
	h.mu.Unlock()
	h.stopWatching()
	if !f.start(func() {
		res, err := f.hold(ctx, h)
		h.reply(nil, res, err)
	}) {
		f.release(h)
		h.reply(nil, rejectResult(Reject{Code: "other", Message: "fulfiller is shutting down"}), nil)
	}
}

// answerDirect writes a, the answer to h, a diverted call nothing held:
// the upstream's result as it was relayed (the bytes the engine got)
// when a relays it, else what hold would have returned.
func (f *Front) answerDirect(h *held, a Answer) {
	h.stopWatching()
	h.mu.Lock()
	r := h.relayed
	h.mu.Unlock()
	var raw json.RawMessage
	var res *mcp.CallToolResult
	var err error
	if r != nil && a.Reject == nil && a.Error == nil && bytes.Equal(a.Result, r.raw) {
		raw = r.raw
	} else {
		res, err = answerResult(a)
	}
	f.release(h)
	h.reply(raw, res, err)
}

// errDirectCancelled: the engine cancelled the request (SendCancel).
var errDirectCancelled = errors.New("cancelled")

// sendDirect sends h's request on the upstream's connection itself (c):
// its response comes back on the goroutine that read it, which tells
// the engine, as the worker of the SDK's call would have. An error:
// nothing was sent.
func (f *Front) sendDirect(c *upConn, callID string, h *held, proposalID string, out *mcp.CallToolParams, forget func()) error {
	meta, metaJSON, ok := c.requestMeta()
	if !ok {
		return errors.New("mcpfront: the upstream's request _meta is not known yet")
	}
	if token := out.GetProgressToken(); token != nil {
		m := make(map[string]json.RawMessage, len(meta)+1)
		for k, v := range meta {
			m[k] = v
		}
		raw, err := json.Marshal(token)
		if err != nil {
			return fmt.Errorf("mcpfront: the progress token: %w", err)
		}
		m["progressToken"] = raw
		if metaJSON, err = json.Marshal(m); err != nil {
			return fmt.Errorf("mcpfront: the request's _meta: %w", err)
		}
	}
	args, _ := out.Arguments.(json.RawMessage)
	if args == nil {
		args = json.RawMessage("{}") // as the SDK's CallTool sends none
	}
	params, err := callParamsJSON(metaJSON, out.Name, args)
	if err != nil {
		return fmt.Errorf("mcpfront: the request's params: %w", err)
	}
	start := time.Now()
	return c.call(callID, params, func(rpc *jsonrpc.Response, err error) {
		resp, res := f.received(h.u, rpc, err)
		resp.ProposalID, resp.Latency = proposalID, time.Since(start)
		if !resp.Failed && resp.Error == nil {
			h.mu.Lock()
			h.relayed = &relayedResult{raw: resp.Result, res: res}
			h.mu.Unlock()
		}
		forget()
		if err := f.eng.Responded(f.ctx, resp); err != nil {
			f.log.Warn("mcp response not taken by the engine", "proposal", proposalID, "err", err)
		}
	})
}

// received is send's outcome for a call sent on the connection itself:
// rpc, its response, or err, why none came.
func (f *Front) received(u *upstream, rpc *jsonrpc.Response, err error) (Response, *mcp.CallToolResult) {
	if err == nil && rpc.Error != nil {
		werr := (*jsonrpc.Error)(nil)
		if errors.As(rpc.Error, &werr) && isUpstreamRPCError(werr) {
			return Response{Error: &RPCError{Code: werr.Code, Message: werr.Message, Data: werr.Data}}, nil
		}
		err = rpc.Error
	}
	if err == nil {
		if raw, ok := relayable(rpc.Result); ok {
			return Response{Result: raw}, nil
		}
		var res mcp.CallToolResult
		if err = json.Unmarshal(rpc.Result, &res); err == nil && res.InputRequests != nil {
			// The SDK's client would have answered them with handlers
			// fulfiller does not have (it declares no capabilities).
			err = errors.New("it asked fulfiller for input (input_required), which fulfiller does not give")
		}
		if err == nil {
			out := withoutResultType(&res)
			raw, merr := json.Marshal(out)
			if merr == nil {
				return Response{Result: raw}, out
			}
			err = fmt.Errorf("its result cannot be relayed: %w", merr)
		}
	}
	if errors.Is(err, errDirectCancelled) {
		err = fmt.Errorf("upstream %s: the call was cancelled", u.Name)
	} else {
		// Worded as the SDK's client words it (its call's error).
		err = fmt.Errorf("upstream %s failed during the call: calling %q: %w", u.Name, "tools/call", err)
	}
	res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}},
		Meta: mcp.Meta{"fulfiller/upstream": u.Name}}
	raw, _ := json.Marshal(res)
	return Response{Result: raw, Failed: true}, nil
}

// cancelDirect takes call id back from c and tells the upstream; its
// Responded (cancelled) is told from a worker, never from the engine's
// goroutine that cancels it.
func (f *Front) cancelDirect(c *upConn, id string) {
	done := c.cancel(id, context.Canceled.Error()) // the SDK's client's reason
	if done == nil {
		return // answered, or failed, first
	}
	if !f.start(func() { done(nil, errDirectCancelled) }) {
		f.log.Debug("mcp cancelled call not reported: the front end is closing", "upstream", c.name, "id", id)
	}
}

// callParamsJSON are the params of a call the Front sends itself:
// {"_meta":meta,"name":name,"arguments":args}, _meta left out when
// there is none. meta and args are JSON already (the SDK's _meta as
// encoded once, the arguments as proposed): only the name is encoded,
// and the whole compacted, as the SDK's encoding of the request would.
func callParamsJSON(meta json.RawMessage, name string, args json.RawMessage) (json.RawMessage, error) {
	qname, err := quote(name)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(meta)+len(qname)+len(args)+40)
	b = append(b, '{')
	if len(meta) > 0 {
		b = append(b, `"_meta":`...)
		b = append(b, meta...)
		b = append(b, ',')
	}
	b = append(b, `"name":`...)
	b = append(b, qname...)
	b = append(b, `,"arguments":`...)
	b = append(b, args...)
	b = append(b, '}')
	s := getScanner()
	defer putScanner(s)
	switch {
	case s.scanText(b):
		if s.ws > 0 {
			var c bytes.Buffer
			if err := json.Compact(&c, b); err != nil {
				return nil, fmt.Errorf("the arguments: %w", err)
			}
			b = c.Bytes()
		}
	case !json.Valid(b): // nested too deep for the scanner, or not JSON
		return nil, errors.New("the arguments are not JSON")
	}
	return b, nil
}

// quote is s as json.Marshal writes it: a name of printable ASCII that
// it escapes nothing of is quoted as it is.
func quote(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return json.Marshal(s)
		}
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// serverInfoKey is the _meta member that names the server in a result
// of the sessionless revision, as a member's name is written.
const serverInfoKey = `"` + metaServerInfo + `":`

// annotate is a result to a request of the sessionless revision as the
// SDK's session writes it (annotateServerInfo): its _meta names the
// server, unless it names one already. raw is the result as JSON, or
// nil for res. The result's bytes are kept and the name spliced into
// them (annotateInPlace); a result that pass does not read is decoded
// and encoded again (annotateDecoded).
func (u *upstream) annotate(raw json.RawMessage, res *mcp.CallToolResult) (json.RawMessage, error) {
	if raw == nil {
		var err error
		if raw, err = json.Marshal(res); err != nil {
			return nil, fmt.Errorf("mcpfront: the result cannot be written: %w", err)
		}
	}
	if out, ok := annotateInPlace(raw, u.serverInfo); ok {
		return out, nil
	}
	return u.annotateDecoded(raw)
}

// annotateInPlace is raw with serverInfo spliced into its _meta (made
// when there is none, or it is null), or raw itself when its _meta
// names a server already: one pass over raw, and one over its _meta.
// ok false: raw is not an object this pass reads strictly, or its _meta
// not an object.
func annotateInPlace(raw, serverInfo []byte) (json.RawMessage, bool) {
	s := getScanner()
	defer putScanner(s)
	if len(serverInfo) == 0 || len(raw) == 0 || raw[0] != '{' || !s.scanText(raw) || s.loose {
		return nil, false
	}
	var meta []byte
	members := len(s.rec)
	for _, m := range s.rec {
		if string(m.name) == `"_meta"` {
			meta = m.value
		}
	}
	out := make([]byte, 0, len(raw)+len(serverInfoKey)+len(serverInfo)+12)
	switch {
	case meta == nil:
		out = append(out, `{"_meta":{`+serverInfoKey...)
		out = append(out, serverInfo...)
		out = append(out, '}')
		if members > 0 {
			out = append(out, ',')
		}
		return append(out, raw[1:]...), true
	case string(meta) == "null":
		at := offsetIn(raw, meta)
		out = append(out, raw[:at]...)
		out = append(out, `{`+serverInfoKey...)
		out = append(out, serverInfo...)
		out = append(out, '}')
		return append(out, raw[at+len(meta):]...), true
	case meta[0] == '{':
		s.reset(meta)
		if !s.scanText(meta) {
			return nil, false
		}
		for _, m := range s.rec {
			if string(m.name) == `"`+metaServerInfo+`"` {
				return raw, true
			}
		}
		end := offsetIn(raw, meta) + len(meta) - 1 // its closing brace
		out = append(out, raw[:end]...)
		if len(s.rec) > 0 {
			out = append(out, ',')
		}
		out = append(out, serverInfoKey...)
		out = append(out, serverInfo...)
		return append(out, raw[end:]...), true
	}
	return nil, false
}

// offsetIn is where part, a slice of whole, begins in it.
func offsetIn(whole, part []byte) int { return cap(whole) - cap(part) }

// annotateDecoded is annotate for a result annotateInPlace does not
// read: decoded into a map, and encoded again (its members sorted).
func (u *upstream) annotateDecoded(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("mcpfront: the result cannot be written: %w", err)
	}
	var meta map[string]json.RawMessage
	if len(m["_meta"]) > 0 && string(m["_meta"]) != "null" {
		if err := json.Unmarshal(m["_meta"], &meta); err != nil {
			return nil, fmt.Errorf("mcpfront: the result's _meta: %w", err)
		}
	}
	if _, named := meta[metaServerInfo]; named {
		return raw, nil
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[metaServerInfo] = u.serverInfo
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("mcpfront: the result's _meta: %w", err)
	}
	m["_meta"] = b
	return json.Marshal(m)
}

// contentTypes are the content blocks a tool result may hold, as the
// SDK's client reads them (contentFromWire).
var contentTypes = map[string]bool{"text": true, "image": true, "audio": true, "resource_link": true, "resource": true}

// relayable is an upstream's result as the client is to get it,
// without decoding it into the SDK's types: its members as they came
// (compacted) but its resultType (the hop's, not the result's), in one
// pass over it and one over its content. ok false: a result the SDK's
// reading is to judge (not an object, a member named twice, a content
// block of no known type, input requested, anything odd or escaped),
// which received then reads as the SDK's client does. The result is a
// new slice: raw may be a reader's buffer.
func relayable(raw json.RawMessage) (json.RawMessage, bool) {
	s := getScanner()
	defer putScanner(s)
	if len(raw) == 0 || raw[0] != '{' || !s.scanText(raw) || s.loose {
		return nil, false
	}
	out := make([]byte, 1, len(raw))
	out[0] = '{'
	for _, m := range s.rec {
		switch string(m.name) {
		case `"resultType"`:
			if string(m.value) != `"complete"` {
				return nil, false
			}
			continue
		case `"inputRequests"`, `"requestState"`:
			return nil, false
		case `"content"`:
			if !contentOK(m.value) {
				return nil, false
			}
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, m.name...)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	out = append(out, '}')
	if s.ws > 0 {
		var c bytes.Buffer
		if json.Compact(&c, out) != nil {
			return nil, false
		}
		out = c.Bytes()
	}
	return out, true
}

// contentOK: v (valid JSON) is null or an array of content blocks of
// known types (a "type" member that names one, unescaped).
func contentOK(v []byte) bool {
	if string(v) == "null" {
		return true
	}
	if v[0] != '[' {
		return false
	}
	s := getScanner()
	defer putScanner(s)
	s.reset(v)
	s.i = 1
	s.skipSpace()
	if s.i < len(v) && v[s.i] == ']' {
		return true
	}
	for {
		if s.i >= len(v) || v[s.i] != '{' {
			return false
		}
		mark := len(s.rec)
		if !s.object(true) {
			return false
		}
		known := false
		for _, m := range s.rec[mark:] {
			if string(m.name) == `"type"` {
				t := m.value
				known = t[0] == '"' && bytes.IndexByte(t, '\\') < 0 && contentTypes[string(t[1:len(t)-1])]
			}
		}
		if !known {
			return false
		}
		s.rec = s.rec[:mark]
		s.skipSpace()
		if s.i >= len(v) {
			return false
		}
		switch v[s.i] {
		case ',':
			s.i++
			s.skipSpace()
		case ']':
			return true
		default:
			return false
		}
	}
}
