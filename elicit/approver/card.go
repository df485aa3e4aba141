// Package approver is the human's side of fulfiller's escalations: it reads
// the elicitation/create requests addressed to one approver, shows each as a
// card (who proposed what, where, why the policy asks, the call's digest and
// deadline), and sends the person's answer back — accept with the form's
// content, decline or cancel — signed with the approver's key when one is
// configured. `fulfiller approve` and `fulfiller demo --interactive` are
// built on it.
package approver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/internal/printable"
)

// Card is one elicitation addressed to this approver, read for a person.
type Card struct {
	RequestID string          // the elicitation's envelope id: answers name it
	RPCID     json.RawMessage // its JSON-RPC id: the answer repeats it
	From      string          // the fulfiller asking
	Message   string          // the sentence every MCP client shows

	Fields    []Field  // editable arguments, in the form's order
	Delegates []string // whom the decision may be handed to (delegate_to)
	// Grant is the grant offered with an approval; nil when none is (or
	// when the card cannot say what a grant would pin: a person is never
	// asked to grant what they cannot see).
	Grant *GrantOffer

	// From params._meta; Proposal is nil when the request carries none.
	Proposal    *Proposal
	Tool        *Tool
	Target      string
	Policy      Policy
	DelegatedBy []string

	// DigestOK reports whether _meta.proposal.digest is the digest of the
	// call shown. A card whose digest does not match cannot be approved:
	// the person would sign a call they were not shown.
	DigestOK bool

	// size is the prompt's payload in bytes, what the card counts toward
	// Options.MaxCardBytes.
	size int
}

// Proposal is the call the approver is asked about.
type Proposal struct {
	ID       string
	From     string
	Method   string
	Params   json.RawMessage
	Digest   string // full call digest; signatures cover it
	Deadline time.Time
	// DeadlineByProposer: the deadline is the proposer's own, sooner than
	// the policy's; the proposer stops waiting then.
	DeadlineByProposer bool
	Revision           string
}

// Tool describes the called tool, as its owner lists it.
type Tool struct {
	Name        string          `json:"name"`
	Server      string          `json:"server"`
	Description string          `json:"description"`
	Annotations json.RawMessage `json:"annotations"`
}

// Policy is why the policy asks and who else may answer.
type Policy struct {
	Message   string   `json:"message"`
	Approvers []string `json:"approvers"`
	Quorum    int      `json:"quorum"`
}

// GrantOffer is a grant the fulfiller offers with an approval (docs/design.md
// "Grants"): "also allow calls like this for a while".
type GrantOffer struct {
	Offers []string // the durations the form accepts, shortest first
	MaxTTL string   // the policy's bound, from _meta.grant
	Scope  []string // the fields a grant pins, from _meta.grant
	// Terms is what a grant made on the call as shown would allow, worked
	// out as the fulfiller works it out: "coder → write_file, path under
	// /srv/app/". Proposer text: escape it to show it.
	Terms string
}

// Field is one argument the approver may change; Default is the proposed
// value.
type Field struct {
	Name        string
	Type        string // string, number, integer or boolean
	Description string
	Enum        []string
	Default     json.RawMessage
}

// ErrNotElicitation is returned by ParseCard for requests that are not an
// elicitation/create with a usable form.
var ErrNotElicitation = errors.New("not an elicitation request")

// ParseCard reads an elicitation/create request envelope.
func ParseCard(env agent.Envelope) (*Card, error) {
	var req agent.RPCRequest
	if err := agent.Unmarshal(env.Payload, &req); err != nil || req.Method != agent.MethodElicitationCreate {
		return nil, ErrNotElicitation
	}
	if len(req.ID) == 0 {
		return nil, fmt.Errorf("%w: no JSON-RPC id", ErrNotElicitation)
	}
	var p struct {
		Message string          `json:"message"`
		Schema  json.RawMessage `json:"requestedSchema"`
		Meta    struct {
			Proposal *struct {
				ID       string          `json:"id"`
				From     string          `json:"from"`
				Method   string          `json:"method"`
				Params   json.RawMessage `json:"params"`
				Digest   string          `json:"digest"`
				Deadline string          `json:"deadline"`
				By       string          `json:"deadline_by"`
				Revision string          `json:"revision"`
			} `json:"proposal"`
			Tool        *Tool           `json:"tool"`
			Target      string          `json:"target"`
			Grant       json.RawMessage `json:"grant"`
			Policy      Policy          `json:"policy"`
			DelegatedBy []string        `json:"delegated_by"`
		} `json:"_meta"`
	}
	if err := agent.Unmarshal(req.Params, &p); err != nil {
		return nil, fmt.Errorf("%w: params: %v", ErrNotElicitation, err)
	}
	c := &Card{RequestID: env.ID, RPCID: req.ID, From: env.From, Message: p.Message, size: len(env.Payload),
		Tool: p.Meta.Tool, Target: p.Meta.Target, Policy: p.Meta.Policy, DelegatedBy: p.Meta.DelegatedBy}
	fields, delegates, offers, err := parseSchema(p.Schema)
	if err != nil {
		return nil, err
	}
	c.Fields, c.Delegates = fields, delegates
	if mp := p.Meta.Proposal; mp != nil {
		c.Proposal = &Proposal{ID: mp.ID, From: mp.From, Method: mp.Method, Params: mp.Params, Digest: mp.Digest, Revision: mp.Revision}
		if string(bytes.TrimSpace(mp.Params)) == "null" {
			c.Proposal.Params = nil
		}
		if t, err := time.Parse(time.RFC3339Nano, mp.Deadline); err == nil {
			c.Proposal.Deadline = t
			c.Proposal.DeadlineByProposer = mp.By == "proposer"
		}
		if d, err := approval.CallDigest(mp.Method, c.Proposal.Params); err == nil && d == mp.Digest {
			c.DigestOK = true
		}
	}
	c.Grant = c.grantOffer(offers, p.Meta.Grant)
	return c, nil
}

// grantOffer reads the grant a card offers: the form's durations, and
// from _meta.grant the policy's scope, from which the terms of a grant on
// the call shown are worked out with the fulfiller's own rules. Without
// the form's durations, a readable scope or a call that has every pinned
// field, no grant is offered here (the fulfiller would refuse it, or the
// person could not see what they give).
func (c *Card) grantOffer(offers []string, meta json.RawMessage) *GrantOffer {
	if len(offers) == 0 || len(meta) == 0 || c.Proposal == nil || c.Proposal.Method != agent.MethodToolsCall {
		return nil
	}
	var m struct {
		MaxTTL json.RawMessage `json:"max_ttl"`
		Scope  json.RawMessage `json:"scope"`
	}
	if agent.Unmarshal(meta, &m) != nil || m.MaxTTL == nil || m.Scope == nil {
		return nil
	}
	var offer decision.Grantable
	if err := agent.Unmarshal([]byte(`{"max_ttl":`+string(m.MaxTTL)+`,"scope":`+string(m.Scope)+`}`), &offer); err != nil {
		return nil
	}
	ttl, err := time.ParseDuration(offers[0])
	if err != nil {
		return nil
	}
	var args map[string]json.RawMessage
	_ = agent.Unmarshal(c.Arguments(), &args)
	name := ""
	if c.Tool != nil {
		name = c.Tool.Name
	}
	if name == "" {
		var p struct {
			Name string `json:"name"`
		}
		_ = agent.Unmarshal(c.Proposal.Params, &p)
		name = p.Name
	}
	call := grants.Call{Proposer: c.Proposal.From, Tool: name, Server: c.server(), Arguments: args}
	g, err := grants.New("", &offer, call, ttl, "", time.Time{})
	if err != nil {
		return nil
	}
	scope := make([]string, len(offer.Scope))
	for i, f := range offer.Scope {
		scope[i] = f.String()
	}
	return &GrantOffer{Offers: offers, MaxTTL: decision.FormatGrantDuration(offer.MaxTTL), Scope: scope, Terms: g.Terms()}
}

// parseSchema reads the flat requestedSchema: the editable fields (every
// property but the fixed ones) in order, the delegate_to choices and the
// grant durations offered.
func parseSchema(raw json.RawMessage) (fields []Field, delegates, grantOffers []string, err error) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
	}
	if err := agent.Unmarshal(raw, &s); err != nil || len(s.Properties) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: no requestedSchema properties", ErrNotElicitation)
	}
	keys, props, err := orderedObject(s.Properties)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: requestedSchema: %v", ErrNotElicitation, err)
	}
	if _, ok := props[approval.FieldApprove]; !ok {
		return nil, nil, nil, fmt.Errorf("%w: the form has no %q field", ErrNotElicitation, approval.FieldApprove)
	}
	for _, k := range keys {
		var prop struct {
			Type        string          `json:"type"`
			Description string          `json:"description"`
			Enum        []string        `json:"enum"`
			Default     json.RawMessage `json:"default"`
		}
		_ = agent.Unmarshal(props[k], &prop)
		switch k {
		case approval.FieldApprove, approval.FieldReason, approval.FieldSignature:
		case approval.FieldDelegateTo:
			delegates = prop.Enum
		case approval.FieldGrant:
			for _, d := range prop.Enum {
				if d != "" {
					grantOffers = append(grantOffers, d)
				}
			}
		default:
			fields = append(fields, Field{Name: k, Type: prop.Type, Description: prop.Description, Enum: prop.Enum, Default: prop.Default})
		}
	}
	return fields, delegates, grantOffers, nil
}

// orderedObject reads a JSON object's keys in order and its values raw.
func orderedObject(raw json.RawMessage) ([]string, map[string]json.RawMessage, error) {
	ms, err := agent.Members(raw)
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	vals := map[string]json.RawMessage{}
	for _, m := range ms {
		if _, dup := vals[m.Key]; !dup {
			keys = append(keys, m.Key)
		}
		vals[m.Key] = m.Value
	}
	return keys, vals, nil
}

// Deadline is when the fulfiller stops waiting; zero when unknown.
func (c *Card) Deadline() time.Time {
	if c.Proposal == nil {
		return time.Time{}
	}
	return c.Proposal.Deadline
}

// Summary is one line naming the card: "p-write: coder → write_file on fs".
func (c *Card) Summary() string {
	if c.Proposal == nil {
		return c.RequestID
	}
	what := c.Proposal.Method
	if c.Tool != nil && c.Tool.Name != "" {
		what = c.Tool.Name
	}
	s := fmt.Sprintf("%s: %s → %s", c.Proposal.ID, c.Proposal.From, what)
	if server := c.server(); server != "" {
		s += " on " + server
	}
	return printable.String(s)
}

func (c *Card) server() string {
	if c.Tool != nil && c.Tool.Server != "" {
		return c.Tool.Server
	}
	return c.Target
}

// Arguments are what the card shows as the call's arguments: params.arguments
// of a tools/call, else the params.
func (c *Card) Arguments() json.RawMessage {
	if c.Proposal == nil || c.Proposal.Params == nil {
		return nil
	}
	if c.Proposal.Method == agent.MethodToolsCall {
		var p struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		_ = agent.Unmarshal(c.Proposal.Params, &p)
		return p.Arguments
	}
	return c.Proposal.Params
}

// Render writes the card for a person. now drives the countdown.
func (c *Card) Render(w io.Writer, now time.Time, color bool) {
	st := style(color)
	// Every value shown comes from others (proposer, tool owner, policy):
	// printable.String keeps it from steering the terminal.
	line := func(label, value string) {
		if value != "" {
			fmt.Fprintf(w, "  %s %s\n", st.dim(fmt.Sprintf("%-10s", label)), value)
		}
	}
	p := printable.String
	fmt.Fprintln(w)
	title := "approval requested"
	if c.Proposal != nil {
		title += " — " + p(c.Proposal.ID)
	}
	fmt.Fprintln(w, st.bold("▌ "+title))
	if len(c.DelegatedBy) > 0 {
		line("handed on", "by "+p(strings.Join(c.DelegatedBy, " → ")))
	}
	if c.Proposal == nil {
		line("message", p(c.Message))
	} else {
		line("proposer", p(c.Proposal.From))
		line("server", p(c.server()))
		if c.Tool != nil && c.Tool.Name != "" {
			tool := st.yellow(p(c.Tool.Name))
			if c.Tool.Description != "" {
				tool += st.dim(" — " + p(c.Tool.Description))
			}
			line("tool", tool)
		} else {
			line("method", p(c.Proposal.Method))
		}
		if args := c.Arguments(); args != nil {
			fmt.Fprintf(w, "  %s\n", st.dim("arguments"))
			for _, l := range strings.Split(pretty(args), "\n") {
				fmt.Fprintf(w, "    %s\n", p(l))
			}
		}
		if c.Tool != nil && len(c.Tool.Annotations) > 0 {
			line("hints", p(string(c.Tool.Annotations)))
		}
	}
	line("policy", p(c.Policy.Message))
	if c.Policy.Quorum > 1 {
		line("needs", fmt.Sprintf("%d approvals of %s", c.Policy.Quorum, p(strings.Join(c.Policy.Approvers, ", "))))
	} else if len(c.Policy.Approvers) > 1 {
		// Who else has been asked (a decision's escalate_to adds
		// approvers as it goes): any one of them decides.
		line("asked", "any 1 of "+p(strings.Join(c.Policy.Approvers, ", ")))
	}
	if c.Proposal != nil {
		d := p(approval.ShortDigest(c.Proposal.Digest))
		if !c.DigestOK {
			d += " " + st.red("⚠ does not match the call shown: this card cannot be approved")
		}
		line("digest", d)
	}
	if dl := c.Deadline(); !dl.IsZero() {
		when := dl.Local().Format("15:04:05") + " (" + Countdown(dl, now) + " left)"
		if c.Proposal != nil && c.Proposal.DeadlineByProposer {
			when += " — set by the proposer, who stops waiting then"
		}
		line("deadline", when)
	}
	if len(c.Fields) > 0 {
		var names []string
		for _, f := range c.Fields {
			names = append(names, p(f.Name+" ("+f.Type+")"))
		}
		line("editable", strings.Join(names, ", "))
	}
	if len(c.Delegates) > 0 {
		line("delegate", "to "+p(strings.Join(c.Delegates, ", ")))
	}
	if g := c.Grant; g != nil {
		line("grantable", "allow "+p(g.Terms)+" for "+p(strings.Join(g.Offers, ", "))+st.dim(" (policy's limit "+p(g.MaxTTL)+")"))
	}
}

// Countdown formats the time left until deadline: "4m05s", "12s", "0s".
func Countdown(deadline, now time.Time) string {
	d := deadline.Sub(now)
	if d <= 0 {
		return "0s"
	}
	d = d.Round(time.Second)
	if d >= time.Hour {
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	if d >= time.Minute {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// pretty indents JSON for reading, keeping the proposer's key order.
func pretty(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// style paints text when colour is on.
type style bool

func (s style) wrap(code, t string) string {
	if !s {
		return t
	}
	return code + t + "\033[0m"
}
func (s style) bold(t string) string   { return s.wrap("\033[1m", t) }
func (s style) dim(t string) string    { return s.wrap("\033[2m", t) }
func (s style) red(t string) string    { return s.wrap("\033[31m", t) }
func (s style) green(t string) string  { return s.wrap("\033[32m", t) }
func (s style) yellow(t string) string { return s.wrap("\033[33m", t) }
