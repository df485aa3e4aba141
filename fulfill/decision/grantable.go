package decision

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Grantable is an escalate decision's offer of a grant (docs/design.md "Grants"):
// an approver who approves may also allow calls like the approved one for
// up to MaxTTL, pinned to the approved call's values of the Scope fields.
// The policy decides whether a grant may be offered and how wide; without
// Grantable no grant can be made.
type Grantable struct {
	MaxTTL time.Duration
	Scope  []GrantField
}

// WithoutProposer is g without a "proposer" entry in its scope (nil for
// nil): the offer as made where the gateway does not authenticate senders
// (docs/design.md "Proposer identity and grants"), since a pin to a
// claimed from would only pretend to narrow the grant. g is not changed.
func (g *Grantable) WithoutProposer() *Grantable {
	if g == nil {
		return nil
	}
	out := &Grantable{MaxTTL: g.MaxTTL}
	for _, f := range g.Scope {
		if f.Path != "proposer" {
			out.Scope = append(out.Scope, f)
		}
	}
	return out
}

// GrantField is one field a grant pins to the approved call's value.
type GrantField struct {
	// Path is "proposer", "tool", "server" or "arguments.NAME".
	Path string
	// Prefix pins a string argument to a prefix of the approved value
	// instead of the whole value (written "arguments.path:prefix").
	Prefix bool
}

// String writes the field as a policy does.
func (f GrantField) String() string {
	if f.Prefix {
		return f.Path + ":prefix"
	}
	return f.Path
}

// grantOffers are the durations an approver is offered, each up to the
// decision's max_ttl: a short ladder people can choose from at a glance.
var grantOffers = []time.Duration{15 * time.Minute, time.Hour, 8 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// Offers are the grant durations to offer, shortest first: those of the
// ladder 15m, 1h, 8h, 24h, 168h within MaxTTL, then MaxTTL itself when it
// is not on the ladder, so that the policy's limit can always be chosen.
func (g Grantable) Offers() []time.Duration {
	var out []time.Duration
	for _, d := range grantOffers {
		if d <= g.MaxTTL {
			out = append(out, d)
		}
	}
	if !slices.Contains(out, g.MaxTTL) {
		out = append(out, g.MaxTTL)
	}
	return out
}

// FormatGrantDuration writes a grant duration as the form offers it
// ("1h", "90m", "168h").
func FormatGrantDuration(d time.Duration) string { return FormatDuration(d) }

// MarshalJSON writes the offer as the policy wrote it.
func (g Grantable) MarshalJSON() ([]byte, error) {
	scope := make([]string, len(g.Scope))
	for i, f := range g.Scope {
		scope[i] = f.String()
	}
	return json.Marshal(struct {
		MaxTTL string   `json:"max_ttl"`
		Scope  []string `json:"scope"`
	}{FormatDuration(g.MaxTTL), scope})
}

// UnmarshalJSON reads an offer as MarshalJSON writes it, as strictly as
// a policy's (a stored decision, or the offer an elicitation carries to
// an approver's client, must not widen on the way back): the same keys,
// the same scope rules (ParseScope), a positive max_ttl.
func (g *Grantable) UnmarshalJSON(b []byte) error {
	const name = "grantable"
	members, err := readObject(name, b)
	if err != nil {
		return err
	}
	if members == nil {
		return malformed(name, "must be an object with max_ttl and scope, got %s", kindOf(b))
	}
	var out Grantable
	var haveTTL, haveScope bool
	for _, m := range members {
		switch m.key {
		case "max_ttl":
			haveTTL = true
			s, err := stringValue(name+".max_ttl", m.value)
			if err != nil {
				return err
			}
			if out.MaxTTL, err = time.ParseDuration(s); err != nil {
				return malformed(name+".max_ttl", "%q is not a duration such as \"8h\"", s)
			}
			if out.MaxTTL <= 0 {
				return malformed(name+".max_ttl", "must be positive, got %q", s)
			}
		case "scope":
			haveScope = true
			list, err := stringListValue(name+".scope", m.value)
			if err != nil {
				return err
			}
			if out.Scope, err = ParseScope(list); err != nil {
				return err
			}
		default:
			return malformed(name, "unknown key %q (want max_ttl and scope)", m.key)
		}
	}
	switch {
	case !haveTTL:
		return malformed(name+".max_ttl", "missing")
	case !haveScope:
		return malformed(name+".scope", "missing")
	}
	*g = out
	return nil
}

// ParseScope reads a grantable's pinned fields, as the policy writes
// them ("tool", "arguments.path:prefix"). A grant always pins the tool;
// the scope must say so, so that a reader of the policy sees how wide the
// grant is. "proposer" pins the proposer where the gateway authenticates
// senders, and is dropped elsewhere (Grantable.WithoutProposer): a scope
// without it is a grant for anyone who may propose. Errors are
// *MalformedDecisionError.
func ParseScope(list []string) ([]GrantField, error) {
	const name = "grantable.scope"
	var out []GrantField
	seen := map[string]bool{}
	for _, s := range list {
		path, mod, hasMod := strings.Cut(s, ":")
		f := GrantField{Path: path}
		if hasMod {
			if mod != "prefix" {
				return nil, malformed(name, "%q: the only modifier is :prefix", s)
			}
			f.Prefix = true
		}
		switch {
		case path == "proposer" || path == "tool" || path == "server":
			if f.Prefix {
				return nil, malformed(name, "%q: only an argument can be pinned to a prefix", s)
			}
		case strings.HasPrefix(path, "arguments."):
			if arg := strings.TrimPrefix(path, "arguments."); arg == "" || strings.Contains(arg, ".") {
				return nil, malformed(name, "%q: want arguments.NAME, a top-level argument", s)
			}
		default:
			return nil, malformed(name, "%q is not proposer, tool, server or arguments.NAME", s)
		}
		if seen[path] {
			return nil, malformed(name, "%q is pinned twice", path)
		}
		seen[path] = true
		out = append(out, f)
	}
	if !seen["tool"] {
		return nil, malformed(name, "must pin tool: a grant is for calls of one tool")
	}
	return out, nil
}

// fmtErr wraps a JSON syntax error with the field it was found in.
func fmtErr(name string, err error) error { return fmt.Errorf("%s: %w", name, err) }
