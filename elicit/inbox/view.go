package inbox

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/printable"
)

// State is where a card stands, as the page shows it.
type State string

// States.
const (
	StateOpen     State = "open"     // waiting for this person's answer
	StateSending  State = "sending"  // answered on the page, being sent
	StateEnding   State = "ending"   // gone from the client, cause to follow
	StateAnswered State = "answered" // the answer was sent
	StateFailed   State = "failed"   // the answer could not be sent
	StateOutcome  State = "outcome"  // what became of an approval is known
	StateEnded    State = "ended"    // ended without this person's answer
)

// closed reports whether the card takes no more answers and only shows
// how it ended.
func (s State) closed() bool {
	return s == StateAnswered || s == StateFailed || s == StateOutcome || s == StateEnded
}

// View is a card as the page receives it (JSON). Every text that comes
// from others (proposer, tool owner, policy) went through
// printable.String: the page inserts text, never HTML, and the escape
// keeps control and bidirectional characters from reordering what the
// person reads.
type View struct {
	ID          string       `json:"id"` // the elicitation's envelope id
	Seq         uint64       `json:"seq"`
	Fulfiller   string       `json:"fulfiller"`
	Message     string       `json:"message"`
	Proposal    string       `json:"proposal,omitempty"`
	Proposer    string       `json:"proposer,omitempty"`
	Method      string       `json:"method,omitempty"`
	Tool        string       `json:"tool,omitempty"`
	Server      string       `json:"server,omitempty"`
	Description string       `json:"description,omitempty"`
	Annotations []Annotation `json:"annotations,omitempty"`
	Arguments   string       `json:"arguments,omitempty"` // indented JSON
	PolicyMsg   string       `json:"policy_message,omitempty"`
	Approvers   []string     `json:"approvers,omitempty"`
	Quorum      int          `json:"quorum,omitempty"`
	DelegatedBy []string     `json:"delegated_by,omitempty"`
	Digest      string       `json:"digest,omitempty"`
	DigestOK    bool         `json:"digest_ok"`
	Deadline    *time.Time   `json:"deadline,omitempty"`
	// DeadlineBy is "proposer" when the deadline is the proposer's own.
	DeadlineBy string      `json:"deadline_by,omitempty"`
	Revision   string      `json:"revision,omitempty"`
	Fields     []FieldView `json:"fields,omitempty"`
	Delegates  []string    `json:"delegates,omitempty"`
	Grant      *GrantView  `json:"grant,omitempty"`
	// Peers are the other approvers' answers about the proposal seen so
	// far, in words: a quorum's progress, or who is against it.
	Peers     []string `json:"peers,omitempty"`
	Approvals int      `json:"approvals,omitempty"` // how many of Peers approved

	State        State  `json:"state"`
	Answer       string `json:"answer,omitempty"`   // what this person answered, in words
	Approved     bool   `json:"approved,omitempty"` // the answer approved the call
	Cause        string `json:"cause,omitempty"`    // StateEnded: approver.Cause
	Note         string `json:"note,omitempty"`     // how it ended, or its outcome, in words
	Outcome      string `json:"outcome,omitempty"`  // StateOutcome: fulfilled or rejected
	RejectReason string `json:"reject_reason,omitempty"`
}

// GrantView is the grant a card offers with an approval (docs/design.md
// "Grants").
type GrantView struct {
	Offers []string `json:"offers"` // sent back as chosen: kept exact
	Terms  string   `json:"terms"`  // what a grant would allow, in words
	MaxTTL string   `json:"max_ttl"`
	Scope  []string `json:"scope"`
}

// Annotation is one of the tool's annotations (readOnlyHint, …).
type Annotation struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// FieldView is an editable argument.
type FieldView struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Description string          `json:"description,omitempty"`
	Enum        []string        `json:"enum,omitempty"`
	Default     json.RawMessage `json:"default,omitempty"`
}

func viewOf(c *approver.Card) View {
	p := printable.String
	v := View{ID: c.RequestID, Fulfiller: p(c.From), Message: p(c.Message), DigestOK: c.DigestOK,
		PolicyMsg: p(c.Policy.Message), Quorum: c.Policy.Quorum}
	for _, a := range c.Policy.Approvers {
		v.Approvers = append(v.Approvers, p(a))
	}
	for _, a := range c.DelegatedBy {
		v.DelegatedBy = append(v.DelegatedBy, p(a))
	}
	for _, d := range c.Delegates {
		v.Delegates = append(v.Delegates, d) // sent back as chosen: kept exact
	}
	if g := c.Grant; g != nil {
		gv := &GrantView{Offers: g.Offers, Terms: p(g.Terms), MaxTTL: p(g.MaxTTL)}
		for _, f := range g.Scope {
			gv.Scope = append(gv.Scope, p(f))
		}
		v.Grant = gv
	}
	if pr := c.Proposal; pr != nil {
		v.Proposal, v.Proposer, v.Method, v.Digest, v.Revision = p(pr.ID), p(pr.From), p(pr.Method), pr.Digest, p(pr.Revision)
		if !pr.Deadline.IsZero() {
			dl := pr.Deadline.UTC()
			v.Deadline = &dl
			if pr.DeadlineByProposer {
				v.DeadlineBy = "proposer"
			}
		}
	}
	if t := c.Tool; t != nil {
		v.Tool, v.Server, v.Description = p(t.Name), p(t.Server), p(t.Description)
		v.Annotations = annotations(t.Annotations)
	}
	if v.Server == "" {
		v.Server = p(c.Target)
	}
	if args := c.Arguments(); len(args) > 0 {
		var b bytes.Buffer
		text := string(args)
		if json.Indent(&b, args, "", "  ") == nil {
			text = b.String()
		}
		// Line by line: the indentation's newlines are the page's, a
		// newline inside a value is already \n in JSON.
		lines := strings.Split(text, "\n")
		for i, l := range lines {
			lines[i] = p(l)
		}
		v.Arguments = strings.Join(lines, "\n")
	}
	for _, f := range c.Fields {
		fv := FieldView{Name: p(f.Name), Type: f.Type, Description: p(f.Description), Default: f.Default}
		for _, e := range f.Enum {
			fv.Enum = append(fv.Enum, e)
		}
		v.Fields = append(v.Fields, fv)
	}
	return v
}

// annotations lists a tool's annotations, in their order, as words.
func annotations(raw json.RawMessage) []Annotation {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []Annotation
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return out
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return out
		}
		name, _ := k.(string)
		out = append(out, Annotation{Name: printable.String(name), Value: printable.String(string(v))})
	}
	return out
}
