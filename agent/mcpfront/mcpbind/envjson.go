package mcpbind

import "encoding/json"

// marshalEnvelope is json.Marshal(e), byte for byte, written by hand
// when every string of e is plain ASCII that needs no escaping and every
// raw value is valid JSON that marshals as it is (marshalsAsIs): the
// common call, whose reflective marshalling was a third of Propose's
// CPU. Anything else is left to json.Marshal.
func marshalEnvelope(e *Envelope) ([]byte, error) {
	if b, ok := appendEnvelope(make([]byte, 0, envelopeSize(e)), e); ok {
		return b, nil
	}
	return json.Marshal(e)
}

// envelopeSize is about the length of e's JSON: room enough to write it
// without growing.
func envelopeSize(e *Envelope) int {
	return 256 + len(e.ID) + len(e.RPCID) + len(e.Server) + len(e.Proposer) + len(e.Client.Name) + len(e.Client.Version) +
		len(e.Client.Title) + len(e.Method) + len(e.Params) + len(e.Tool.Name) + len(e.Tool.Description) +
		len(e.Tool.InputSchema) + len(e.Tool.Annotations) + len(e.Tool.Digest)
}

// appendEnvelope appends e's JSON as json.Marshal writes it (the
// fields in Envelope's order, omitempty as tagged); ok is false when e
// holds a string or raw value it does not write itself.
func appendEnvelope(b []byte, e *Envelope) (_ []byte, ok bool) {
	w := envWriter{b: b, ok: true}
	w.raw(`{"id":`)
	w.str(e.ID)
	if len(e.RPCID) > 0 {
		w.raw(`,"rpc_id":`)
		w.json(e.RPCID)
	}
	w.raw(`,"front_end":`)
	w.str(e.FrontEnd)
	w.raw(`,"server":`)
	w.str(e.Server)
	w.raw(`,"proposer":`)
	w.str(e.Proposer)
	w.raw(`,"client":{"name":`)
	w.str(e.Client.Name)
	if e.Client.Version != "" {
		w.raw(`,"version":`)
		w.str(e.Client.Version)
	}
	if e.Client.Title != "" {
		w.raw(`,"title":`)
		w.str(e.Client.Title)
	}
	w.raw(`},"method":`)
	w.str(e.Method)
	w.raw(`,"params":`)
	// Not omitempty: a nil RawMessage marshals as null, an empty one
	// fails; both left to json.Marshal.
	w.json(e.Params)
	w.raw(`,"tool":{"name":`)
	w.str(e.Tool.Name)
	if e.Tool.Listed {
		w.raw(`,"listed":true`)
	}
	if e.Tool.Description != "" {
		w.raw(`,"description":`)
		w.str(e.Tool.Description)
	}
	if len(e.Tool.InputSchema) > 0 {
		w.raw(`,"input_schema":`)
		w.json(e.Tool.InputSchema)
	}
	if len(e.Tool.Annotations) > 0 {
		w.raw(`,"annotations":`)
		w.json(e.Tool.Annotations)
	}
	if e.Tool.Digest != "" {
		w.raw(`,"digest":`)
		w.str(e.Tool.Digest)
	}
	w.raw(`}`)
	if c := e.Changed; c != nil {
		w.raw(`,"changed":{"old":`)
		w.str(c.Old)
		w.raw(`,"new":`)
		w.str(c.New)
		w.raw(`}`)
	}
	if e.Elicitation {
		w.raw(`,"elicitation":true`)
	}
	if e.Progress {
		w.raw(`,"progress":true`)
	}
	w.raw(`}`)
	return w.b, w.ok
}

// envWriter appends JSON; ok turns false at the first value it does not
// write as json.Marshal would.
type envWriter struct {
	b  []byte
	ok bool
}

func (w *envWriter) raw(s string) { w.b = append(w.b, s...) }

// str writes s quoted when it needs no escaping: printable ASCII but
// '"', '\\' and the '<', '>', '&' json.Marshal escapes.
func (w *envWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			w.ok = false
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

// json writes v as it is when it is valid JSON that json.Marshal leaves
// as it is (marshalsAsIs).
func (w *envWriter) json(v json.RawMessage) {
	if len(v) == 0 || !marshalsAsIs(v) || !json.Valid(v) {
		w.ok = false
		return
	}
	w.b = append(w.b, v...)
}
