package elicit

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mewkit/fulfiller/agent"
)

// object is a JSON object that keeps its members in the order they were
// added or read. Forms and edited arguments go on the wire in a readable,
// stable order (approve first; the proposer's own argument order), which
// maps cannot give.
type object []member

type member struct {
	key   string
	value any // anything marshal accepts; json.RawMessage is written as is (compacted)
}

// add appends a member; callers add each key once.
func (o *object) add(key string, value any) { *o = append(*o, member{key, value}) }

// set replaces the value of key, or appends it.
func (o *object) set(key string, value any) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].value = value
			return
		}
	}
	o.add(key, value)
}

// get returns the value of key.
func (o object) get(key string) (any, bool) {
	for _, m := range o {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

// raw returns the value of key as raw JSON, when it was read from JSON.
func (o object) raw(key string) (json.RawMessage, bool) {
	v, ok := o.get(key)
	if !ok {
		return nil, false
	}
	r, ok := v.(json.RawMessage)
	return r, ok
}

// MarshalJSON writes the members in order, without HTML escaping.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(m.key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		var v []byte
		if r, ok := m.value.(json.RawMessage); ok {
			var c bytes.Buffer
			if err := json.Compact(&c, r); err != nil {
				return nil, fmt.Errorf("member %q: %w", m.key, err)
			}
			v = c.Bytes()
		} else if v, err = marshal(m.value); err != nil {
			return nil, fmt.Errorf("member %q: %w", m.key, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeObject reads a JSON object keeping its key order; values stay raw.
// A key that occurs twice keeps its first position and its last value, as
// JavaScript does.
func decodeObject(b []byte) (object, error) {
	ms, err := agent.Members(b)
	if err != nil {
		return nil, err
	}
	o := object{}
	for _, m := range ms {
		o.set(m.Key, m.Value)
	}
	return o, nil
}

// marshal is json.Marshal without HTML escaping: messages and arguments
// are shown to people and compared byte for byte in tests, and `<`, `>`,
// `&` need no escaping in JSON.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// mustMarshal is marshal for values built from JSON-safe types only.
func mustMarshal(v any) json.RawMessage {
	b, err := marshal(v)
	if err != nil {
		panic(fmt.Sprintf("elicit: value does not marshal: %v", err))
	}
	return b
}
