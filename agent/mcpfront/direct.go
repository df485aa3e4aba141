package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

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
// encoded once, the arguments as proposed): only the name is encoded.
func callParamsJSON(meta json.RawMessage, name string, args json.RawMessage) (json.RawMessage, error) {
	qname, err := json.Marshal(name)
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
	if !json.Valid(b) {
		return nil, errors.New("the arguments are not JSON")
	}
	return b, nil
}

// annotate is a result to a request of the sessionless revision as the
// SDK's session writes it (annotateServerInfo): its _meta names the
// server, unless it names one already. raw is the result as JSON, or
// nil for res.
func (u *upstream) annotate(raw json.RawMessage, res *mcp.CallToolResult) (json.RawMessage, error) {
	if raw == nil {
		var err error
		if raw, err = json.Marshal(res); err != nil {
			return nil, fmt.Errorf("mcpfront: the result cannot be written: %w", err)
		}
	}
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
// but its resultType (the hop's, not the result's). ok false: a result
// the SDK's reading is to judge (not an object, a member named twice, a
// content block of no known type, input requested, anything odd), which
// received then reads as the SDK's client does.
func relayable(raw json.RawMessage) (json.RawMessage, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	var out bytes.Buffer
	out.Grow(len(raw))
	enc := jsontext.NewEncoder(&out)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' || enc.WriteToken(tok) != nil {
		return nil, false
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		key := name.String()
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		switch key {
		case "resultType":
			if string(v) != `"complete"` {
				return nil, false
			}
			continue
		case "inputRequests", "requestState":
			return nil, false
		case "content":
			if !contentOK(v) {
				return nil, false
			}
		}
		if enc.WriteToken(jsontext.String(key)) != nil || enc.WriteValue(v) != nil {
			return nil, false
		}
	}
	if tok, err := dec.ReadToken(); err != nil || enc.WriteToken(tok) != nil {
		return nil, false
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, false // trailing data
	}
	return bytes.TrimRight(out.Bytes(), "\n"), true
}

// contentOK: v is an array of content blocks of known types.
func contentOK(v jsontext.Value) bool {
	var blocks []struct {
		Type string `json:"type"`
	}
	if err := jsonv2.Unmarshal(v, &blocks, jsonv2.RejectUnknownMembers(false)); err != nil {
		return false
	}
	for _, b := range blocks {
		if !contentTypes[b.Type] {
			return false
		}
	}
	return true
}
