package elicit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
)

// MaxDelegationHops bounds how often one request may be handed on, so a
// prompt cannot circle among approvers until its deadline.
const MaxDelegationHops = 3

// maxMessageArgs bounds the arguments quoted in the human-readable message;
// the whole call is in _meta and on the card.
const maxMessageArgs = 160

func isReserved(name string) bool {
	switch name {
	case approval.FieldApprove, approval.FieldReason, approval.FieldDelegateTo, approval.FieldSignature, approval.FieldGrant:
		return true
	}
	return false
}

// field is one argument an approver may edit, typed for a flat form.
type field struct {
	name     string
	typ      string // string, number, integer or boolean
	enum     []string
	proposed json.RawMessage // the proposed value; nil when the call has none
	schema   object          // the property in requestedSchema
}

// call is the parsed call an escalation asks about.
type call struct {
	method string
	params json.RawMessage
	tool   string // tools/call: the tool's name
	args   object // tools/call: params.arguments; other methods: params; nil when absent
}

func parseCall(method string, params json.RawMessage) call {
	c := call{method: method, params: params}
	if len(bytes.TrimSpace(params)) == 0 {
		return c
	}
	p, err := decodeObject(params)
	if err != nil {
		return c
	}
	if method != agent.MethodToolsCall {
		c.args = p
		return c
	}
	if raw, ok := p.raw("name"); ok {
		_ = agent.Unmarshal(raw, &c.tool)
	}
	if raw, ok := p.raw("arguments"); ok {
		c.args, _ = decodeObject(raw)
	}
	return c
}

// editableFields types each argument the decision lets approvers change.
// The type comes from the tool's input schema when known, else from the
// proposed value; arguments that cannot be a flat primitive form field are
// left out (and logged), never offered in a form the approver's client
// would have to reject.
func editableFields(c call, inputSchema json.RawMessage, names []string, log *slog.Logger) []field {
	var props map[string]map[string]any
	if len(inputSchema) > 0 {
		var s struct {
			Properties map[string]map[string]any `json:"properties"`
		}
		if agent.Unmarshal(inputSchema, &s) == nil {
			props = s.Properties
		}
	}
	var out []field
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		if isReserved(name) {
			log.Warn("editable argument has the name of a form field; not offered for editing", "argument", name)
			continue
		}
		f := field{name: name}
		if c.args != nil {
			f.proposed, _ = c.args.raw(name)
		}
		prop := props[name]
		f.typ = schemaType(prop["type"])
		if f.typ == "" && prop["type"] == nil {
			f.typ = valueType(f.proposed)
		}
		if f.typ == "" {
			log.Warn("editable argument is not a string, number, integer or boolean; not offered for editing", "argument", name)
			continue
		}
		if f.proposed != nil && checkValue(f, f.proposed) != nil {
			f.proposed = nil // a proposed value of the wrong type is no default
		}
		f.schema = object{{"type", f.typ}, {"title", name}}
		if d, ok := prop["description"].(string); ok && d != "" {
			f.schema.add("description", d)
		}
		if f.typ == "string" {
			if list, ok := prop["enum"].([]any); ok {
				for _, v := range list {
					if s, ok := v.(string); ok {
						f.enum = append(f.enum, s)
					}
				}
				if len(f.enum) > 0 {
					f.schema.add("enum", f.enum)
				}
			}
			if fm, ok := prop["format"].(string); ok && slices.Contains([]string{"email", "uri", "date", "date-time"}, fm) {
				f.schema.add("format", fm)
			}
		}
		for _, k := range []string{"minimum", "maximum", "minLength", "maxLength"} {
			n, ok := prop[k].(float64)
			if !ok {
				continue
			}
			if (f.typ == "string") == strings.HasSuffix(k, "Length") {
				f.schema.add(k, n)
			}
		}
		if f.proposed != nil {
			f.schema.add("default", f.proposed)
		}
		out = append(out, f)
	}
	return out
}

// schemaType reads a JSON Schema type that a flat form can hold:
// "string", or ["string","null"] and the like.
func schemaType(t any) string {
	switch x := t.(type) {
	case string:
		switch x {
		case "string", "number", "integer", "boolean":
			return x
		}
	case []any:
		for _, e := range x {
			if s := schemaType(e); s != "" {
				return s
			}
		}
	}
	return ""
}

// valueType infers a form type from a proposed value.
func valueType(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "number"
	}
	return ""
}

// checkValue reports whether v is a valid value for the field.
func checkValue(f field, v json.RawMessage) error {
	v = bytes.TrimSpace(v)
	want := f.typ
	switch {
	case len(v) == 0:
		return fmt.Errorf("%s: no value", f.name)
	case want == "string":
		var s string
		if v[0] != '"' || agent.Unmarshal(v, &s) != nil {
			return fmt.Errorf("%s must be a string", f.name)
		}
		if len(f.enum) > 0 && !slices.Contains(f.enum, s) {
			return fmt.Errorf("%s must be one of %s", f.name, strings.Join(f.enum, ", "))
		}
	case want == "boolean":
		if string(v) != "true" && string(v) != "false" {
			return fmt.Errorf("%s must be true or false", f.name)
		}
	case want == "number" || want == "integer":
		if valueType(v) != "number" {
			return fmt.Errorf("%s must be a number", f.name)
		}
		n, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(n, 0) {
			return fmt.Errorf("%s must be a number", f.name)
		}
		if want == "integer" && n != math.Trunc(n) {
			return fmt.Errorf("%s must be a whole number", f.name)
		}
	}
	return nil
}

// schema builds the flat requestedSchema (MCP: primitives only). grants,
// when offered, are the durations a grant may last, "" (no grant) first
// so that a client's default is none.
func schema(fields []field, delegates, grants []string) object {
	props := object{
		{approval.FieldApprove, object{{"type", "boolean"}, {"title", "Approve?"}}},
		{approval.FieldReason, object{{"type", "string"}, {"title", "Reason"}}},
	}
	for _, f := range fields {
		props.add(f.name, f.schema)
	}
	if len(delegates) > 0 {
		props.add(approval.FieldDelegateTo, object{{"type", "string"}, {"title", "Delegate to"}, {"enum", delegates}})
	}
	if len(grants) > 0 {
		props.add(approval.FieldGrant, object{{"type", "string"}, {"title", "Also allow calls like this for"}, {"enum", append([]string{""}, grants...)}, {"default", ""}})
	}
	return object{{"type", "object"}, {"properties", props}, {"required", []string{approval.FieldApprove}}}
}

// message is the short sentence every MCP client shows: who proposed what,
// where, why the policy asks, and the call's short digest so that two
// look-alike proposals can be told apart.
func message(esc escalation, c call, digest string, quorum int, delegatedBy []string) string {
	var b strings.Builder
	if n := len(delegatedBy); n > 0 {
		fmt.Fprintf(&b, "%s delegated this to you. ", delegatedBy[n-1])
	}
	who := esc.From
	if c.method == agent.MethodToolsCall && c.tool != "" {
		fmt.Fprintf(&b, "%s wants to call %s", who, c.tool)
		if esc.Target != "" {
			fmt.Fprintf(&b, " on %s", esc.Target)
		}
		if c.args != nil {
			b.WriteString(" with ")
			b.WriteString(clip(string(mustMarshal(c.args)), maxMessageArgs))
		}
	} else {
		fmt.Fprintf(&b, "%s wants to send %s", who, c.method)
		if esc.Target != "" {
			fmt.Fprintf(&b, " to %s", esc.Target)
		}
	}
	if m := strings.TrimSpace(esc.Decision.Message); m != "" {
		b.WriteString(": ")
		b.WriteString(strings.TrimSuffix(m, "."))
	}
	b.WriteString(".")
	if quorum > 1 {
		fmt.Fprintf(&b, " Needs %d approvals.", quorum)
	}
	fmt.Fprintf(&b, " Call digest %s.", approval.ShortDigest(digest))
	return b.String()
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// meta is params._meta: the proposal named without a correlation_id (see
// docs/protocol.md), and context for richer clients. Nothing in it is needed to
// answer.
func meta(esc escalation, digest string, quorum int, approvers []string, fields []field, delegatedBy []string) object {
	params := json.RawMessage("null")
	if len(bytes.TrimSpace(esc.Params)) > 0 {
		params = esc.Params
	}
	prop := object{
		{"id", esc.ID},
		{"from", esc.From},
		{"method", esc.Method},
		{"params", params},
		{"digest", digest},
		{"deadline", esc.Deadline.UTC().Format(time.RFC3339Nano)},
	}
	if esc.DeadlineByProposer {
		// The proposal's own deadline, sooner than the policy's: the
		// proposer stops waiting then, so the card says so.
		prop.add("deadline_by", "proposer")
	}
	if esc.Decision.Revision != "" {
		prop.add("revision", esc.Decision.Revision)
	}
	m := object{{"proposal", prop}}
	if t := esc.Tool; t != nil {
		tool := object{{"name", t.Name}}
		if t.Server != "" {
			tool.add("server", t.Server)
		}
		if t.Description != "" {
			tool.add("description", t.Description)
		}
		if len(t.Annotations) > 0 {
			tool.add("annotations", t.Annotations)
		}
		m.add("tool", tool)
	}
	if esc.Target != "" {
		m.add("target", esc.Target)
	}
	policy := object{}
	if esc.Decision.Message != "" {
		policy.add("message", esc.Decision.Message)
	}
	policy.add("approvers", approvers)
	policy.add("quorum", quorum)
	if len(fields) > 0 {
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.name
		}
		policy.add("editable", names)
	}
	m.add("policy", policy)
	if len(delegatedBy) > 0 {
		m.add("delegated_by", delegatedBy)
	}
	return m
}

// result is an elicitation answer's result.
type result struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content"`
}

// form is an accepted answer's content, read leniently: a missing or
// non-boolean approve is "not approved".
type form struct {
	approve    bool
	reason     string
	delegateTo string
	grant      string // the chosen grant duration; "" for none
	grantBad   bool   // a grant field that is not a string
	fields     map[string]json.RawMessage
}

func readForm(content json.RawMessage) form {
	var f form
	_ = agent.Unmarshal(content, &f.fields)
	if raw, ok := f.fields[approval.FieldApprove]; ok {
		f.approve = string(bytes.TrimSpace(raw)) == "true"
	}
	if raw, ok := f.fields[approval.FieldReason]; ok {
		_ = agent.Unmarshal(raw, &f.reason)
		f.reason = strings.TrimSpace(f.reason)
	}
	if raw, ok := f.fields[approval.FieldDelegateTo]; ok {
		_ = agent.Unmarshal(raw, &f.delegateTo)
	}
	if raw, ok := f.fields[approval.FieldGrant]; ok {
		f.grantBad = agent.Unmarshal(raw, &f.grant) != nil
	}
	return f
}

// applyEdits returns the call as edited by an approval: params with each
// edited argument replaced, or nil when nothing differs from the proposal
// (clients send the defaults back; an unchanged value is no edit). key
// names the resulting call, so approvals of different edits are told apart.
func applyEdits(c call, fields []field, content form) (params json.RawMessage, key string, err error) {
	var edited object
	for _, f := range fields {
		v, ok := content.fields[f.name]
		if !ok {
			continue
		}
		if err := checkValue(f, v); err != nil {
			return nil, "", err
		}
		if f.proposed != nil {
			a, errA := approval.Canonical(v)
			b, errB := approval.Canonical(f.proposed)
			if errA == nil && errB == nil && bytes.Equal(a, b) {
				continue
			}
		}
		edited = append(edited, member{f.name, json.RawMessage(v)})
	}
	if len(edited) == 0 {
		return nil, "", nil
	}
	args := slices.Clone(c.args)
	for _, m := range edited {
		args.set(m.key, m.value)
	}
	var p object
	if c.method == agent.MethodToolsCall {
		if len(bytes.TrimSpace(c.params)) > 0 {
			if p, err = decodeObject(c.params); err != nil {
				return nil, "", fmt.Errorf("params: %w", err)
			}
		}
		if p == nil {
			p = object{{"name", c.tool}}
		}
		p.set("arguments", args)
	} else {
		p = args
	}
	params, err = p.MarshalJSON()
	if err != nil {
		return nil, "", err
	}
	canon, err := approval.Canonical(params)
	if err != nil {
		return nil, "", fmt.Errorf("edited params: %w", err)
	}
	return params, string(canon), nil
}
