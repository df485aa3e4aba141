package agent

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/go-json-experiment/json/jsontext"
)

// Member is one member of a JSON object: its key and its value as written.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Members reads the members of the JSON object raw in the order written,
// each value a slice of raw, not a copy. Keys come back unescaped and
// exact. Like JSON.parse it takes a key written twice (both members are
// returned: the caller decides which counts) and text that is not UTF-8;
// anything that is not an object is an error.
func Members(raw []byte) ([]Member, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var out []Member
	err := EachMember(dec, func(key string) error {
		start := dec.InputOffset()
		err := dec.SkipValue()
		out = append(out, Member{key, bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n:")})
		return err
	})
	return out, err
}

// EachMember reads the object that comes next in dec, calling visit with
// each key; visit reads the key's value from dec.
func EachMember(dec *jsontext.Decoder, visit func(key string) error) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '{' {
		return errors.New("not a JSON object")
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := visit(name.String()); err != nil {
			return err
		}
	}
	_, err = dec.ReadToken() // '}'
	return err
}
