package approver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// CheckEdits validates an approver's changed arguments (by field name,
// as a page sends them) against the card's form: only editable fields,
// each of its type (and enum). Both inboxes check with it, so that what
// one accepts the other does. An edit equal to the proposed value is not a
// change and is dropped. The result is in the form's order, so that the
// content signed is the same whatever order the page sent them in.
func CheckEdits(c *Card, edits map[string]json.RawMessage) ([]Edit, error) {
	for name := range edits {
		if !slices.ContainsFunc(c.Fields, func(f Field) bool { return f.Name == name }) {
			return nil, fmt.Errorf("%q is not an editable argument", name)
		}
	}
	var out []Edit
	for _, f := range c.Fields {
		raw, ok := edits[f.Name]
		if !ok {
			continue
		}
		v, err := checkEditValue(f, raw)
		if err != nil {
			return nil, err
		}
		if sameJSON(v, f.Default) {
			continue
		}
		out = append(out, Edit{Name: f.Name, Value: v})
	}
	return out, nil
}

// checkEditValue checks one edited value against its field and returns it
// compact, as typed ("<" stays "<").
func checkEditValue(f Field, raw json.RawMessage) (json.RawMessage, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: not JSON: %w", f.Name, err)
	}
	switch f.Type {
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			return nil, fmt.Errorf("%s must be a whole number", f.Name)
		}
	case "number":
		n, ok := v.(json.Number)
		x, err := n.Float64()
		if !ok || err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("%s must be a number", f.Name)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("%s must be true or false", f.Name)
		}
	default:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s must be text", f.Name)
		}
		if len(f.Enum) > 0 && !slices.Contains(f.Enum, s) {
			return nil, fmt.Errorf("%s must be one of %s", f.Name, strings.Join(f.Enum, ", "))
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// sameJSON reports whether two JSON values are equal (b empty: never).
func sameJSON(a, b json.RawMessage) bool {
	if len(b) == 0 {
		return false
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
