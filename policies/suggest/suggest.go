// Package suggest proposes Rego rules from the human decisions of a
// decision log (issue 16, "progressive automation"): calls that humans
// approved again and again, by the same proposer, of the same tool on the
// same server, and that no human declined, become a candidate rule that
// would have fulfilled them without asking — written as a policy file with
// its unit tests for a policy author to review and commit. Nothing is
// applied automatically.
//
// A suggestion is deliberately narrow. Within a (proposer, tool, server)
// group, an argument with the same value in every approval is pinned to
// it; string paths that vary but share a directory below the root are
// allowed under that directory (never a bare string prefix, and never a
// value with "." or ".." segments, the rule grants.Dir and grants.Climbs
// apply to grants); other arguments that varied are left free, and the
// suggestion says so; an argument no approval had is not allowed. A
// path-like argument that varies without a common directory, or a human
// decline the pattern would cover, cancels the group's suggestion: the
// evidence does not support a rule.
//
// Learn reads the log once, streaming, with replay's record reader; Score
// replays the log against a suggestion (alone, and with the current
// policy) to count the false approvals, which must be zero, and the
// needless asks it would have saved.
package suggest

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog/logrecord"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/policies/replay"
)

// Defaults for Options.
const (
	// DefaultMin is how many human approvals a group needs.
	DefaultMin = 5
	// DefaultMaxPending bounds the escalations held while they await
	// their human answer and outcome.
	DefaultMaxPending = replay.DefaultMaxPending
	// DefaultMaxGroups bounds the (proposer, tool, server) groups learnt.
	DefaultMaxGroups = 10000
	// DefaultMaxCases bounds the recorded calls kept per group for the
	// generated tests: this many approved and this many declined calls.
	DefaultMaxCases = 20
	// MaxListedIDs is how many proposal ids a suggestion's header names.
	MaxListedIDs = 5
	// maxDeclines bounds the declined calls kept per group to check
	// against its pattern; a group with more is not suggested (replay
	// would still catch a covered one, but the suggestion could not say
	// which).
	maxDeclines = 1000
	// maxDistinct bounds the distinct values counted per argument.
	maxDistinct = 1000
)

// Options tune Learn.
type Options struct {
	// Min is how many human approvals a group needs [DefaultMin].
	Min int
	// Source names the log in the generated files' headers.
	Source string
	// MaxLine is the longest line read [replay.DefaultMaxLine].
	MaxLine int
	// MaxPending bounds the escalations held awaiting their answer
	// [DefaultMaxPending]; the oldest is evicted beyond it and counted.
	MaxPending int
	// MaxGroups bounds the groups learnt [DefaultMaxGroups]; calls of
	// further groups are counted and not learnt from.
	MaxGroups int
	// MaxCases bounds the approved (and the declined) calls kept per
	// group as test cases [DefaultMaxCases].
	MaxCases int
	// Rego formats the rules written (required).
	Rego Rego
}

// Kind says how a suggestion constrains an argument.
type Kind string

// Argument kinds.
const (
	Pinned Kind = "pinned" // the same value in every approval
	Prefix Kind = "prefix" // a string path under a common directory
	Free   Kind = "free"   // any value: it varied
)

// Arg is how a suggestion constrains one argument of the call.
type Arg struct {
	Name     string          `json:"name"`
	Kind     Kind            `json:"kind"`
	Value    json.RawMessage `json:"value,omitempty"`  // Pinned: canonical JSON
	Prefix   string          `json:"prefix,omitempty"` // Prefix: the directory, with its trailing slash
	Distinct int             `json:"distinct"`         // distinct values approved (at most 1000 counted)
	Present  int             `json:"present"`          // approvals that had the argument
	// Optional: some approvals lacked the argument, so a call may too.
	Optional bool `json:"optional,omitempty"`
}

// Suggestion is one proposed rule and the files that hold it.
type Suggestion struct {
	Name      string    `json:"name"`    // a Rego identifier, unique in one Learn
	Package   string    `json:"package"` // fulfiller.suggested.<name>
	Proposer  string    `json:"proposer"`
	Tool      string    `json:"tool"`
	Server    string    `json:"server,omitempty"` // "": the log did not know it; the rule requires it unknown
	Approvals int       `json:"approvals"`
	Approvers []string  `json:"approvers"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
	// ProposalIDs are the first MaxListedIDs approved proposals.
	ProposalIDs []string `json:"proposal_ids"`
	// Declines counts the group's declined calls, none of which the rule
	// covers (they are test cases that expect no fulfilment).
	Declines int   `json:"declines"`
	Args     []Arg `json:"args"`
	// RuleFile and TestFile are the generated files' names; Rule and
	// Test their contents, formatted as opa fmt formats them.
	RuleFile string `json:"rule_file"`
	TestFile string `json:"test_file"`
	Rule     []byte `json:"-"`
	Test     []byte `json:"-"`
	// Score is the replay's, set by Scorer.ScoreAll.
	Score *Scores `json:"score,omitempty"`
	// Tests counts the generated tests that passed, set by Check.
	Tests int `json:"tests,omitempty"`
}

// Skipped is a group with human approvals that got no suggestion.
type Skipped struct {
	Proposer  string `json:"proposer"`
	Tool      string `json:"tool"`
	Server    string `json:"server,omitempty"`
	Approvals int    `json:"approvals"`
	Declines  int    `json:"declines"`
	Reason    string `json:"reason"`
}

// Result is what Learn found.
type Result struct {
	Lines     int64 `json:"lines"`
	Malformed int64 `json:"malformed"`
	// Approved and Declined count the escalations humans answered that
	// were learnt from.
	Approved int64 `json:"approved"`
	Declined int64 `json:"declined"`
	// Edited counts approvals of a call a human edited first: the
	// original call was not approved, so they are not evidence.
	Edited int64 `json:"edited"`
	// Masked counts approvals whose recorded input had erased values,
	// not learnt from (masked declines are).
	Masked int64 `json:"masked"`
	// Other counts answered escalations that were no tools/call or whose
	// input could not be read, not learnt from.
	Other int64 `json:"other"`
	// Evicted escalations were dropped from the bounded map before
	// their answer; GroupsFull counts answers beyond MaxGroups.
	Evicted     int64        `json:"evicted"`
	GroupsFull  int64        `json:"groups_full"`
	Suggestions []Suggestion `json:"suggestions"`
	Skipped     []Skipped    `json:"skipped"`
}

// call is one recorded tools/call, as the policy saw it.
type call struct {
	id       string
	time     time.Time
	by       []string
	proposer string
	tool     string
	server   string
	args     map[string]json.RawMessage
	hasArgs  bool // params.arguments was present
	// input is the recorded input's method, params, proposer and tool
	// (what a suggested rule reads), for the generated tests.
	input map[string]json.RawMessage
}

// held is an escalation awaiting its human answer.
type held struct {
	call     *call
	err      string // why the call cannot be learnt from ("" if it can)
	masked   bool
	declined bool
	approved bool
	edited   bool
	elem     *list.Element
}

type groupKey struct{ proposer, tool, server string }

// group is what is learnt of one (proposer, tool, server).
type group struct {
	key       groupKey
	order     int // first seen, for a stable output order
	approvals int
	approvers map[string]bool
	first     time.Time
	last      time.Time
	ids       []string
	noArgs    int // approvals without params.arguments
	args      map[string]*argStats
	cases     []*call // approved calls kept for tests
	declines  []*call
	declTotal int
}

// argStats generalises one argument's approved values as they stream by.
type argStats struct {
	present  int
	first    []byte // canonical JSON of the first value
	same     bool
	strings  bool   // every value a string
	slash    bool   // some value contains "/": a path
	dirOK    bool   // every value has a directory below the root, without . or ..
	dir      string // the common directory so far
	distinct map[string]struct{}
}

type learner struct {
	ctx     context.Context
	opts    Options
	res     *Result
	pending map[string]*held
	order   *list.List
	groups  map[groupKey]*group
}

// Learn reads a decision log from r and returns the suggestions its human
// decisions support. Malformed lines are counted, never fatal; the error
// is a read error of r or ctx's.
func Learn(ctx context.Context, r io.Reader, opts Options) (*Result, error) {
	if opts.Rego == nil {
		return nil, errors.New("suggest: Options.Rego is nil: nothing to write the rules with")
	}
	if opts.Min <= 0 {
		opts.Min = DefaultMin
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = replay.DefaultMaxLine
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxGroups <= 0 {
		opts.MaxGroups = DefaultMaxGroups
	}
	if opts.MaxCases <= 0 {
		opts.MaxCases = DefaultMaxCases
	}
	l := &learner{
		ctx: ctx, opts: opts,
		res:     &Result{Suggestions: []Suggestion{}, Skipped: []Skipped{}},
		pending: map[string]*held{},
		order:   list.New(),
		groups:  map[groupKey]*group{},
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, size, tooLong, err := replay.ReadLine(br, opts.MaxLine)
		if size == 0 && err == io.EOF {
			break
		}
		l.res.Lines++
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", l.res.Lines, err)
		}
		if tooLong {
			l.res.Malformed++
		} else {
			l.line(b)
		}
		if err == io.EOF {
			break
		}
	}
	// What is still held ends with the log: an approval with no later
	// record still counts, as in replay.
	for e := l.order.Front(); e != nil; e = e.Next() {
		l.settle(e.Value.(*held))
	}
	l.suggest()
	return l.res, nil
}

func (l *learner) line(b []byte) {
	rec, err := replay.DecodeRecord(b)
	if err != nil {
		l.res.Malformed++
		return
	}
	if rec == nil || rec.ProposalID == "" {
		return
	}
	h := l.pending[rec.ProposalID]
	switch rec.Type {
	case logrecord.TypeDecision:
		if h != nil {
			if rec.Reevaluated {
				h.edited = true // a human edited the call before approving it
			}
			return
		}
		if !rec.Reevaluated {
			l.decision(rec)
		}
	case logrecord.TypeApproval:
		if h != nil && replay.HumanDeclined(rec) {
			h.declined = true
		}
	case logrecord.TypeOutcome:
		if h == nil {
			return
		}
		ended, approved := replay.Ends(rec.Stage)
		switch {
		case approved:
			// Wait for what follows: a re-evaluation right after
			// "approved" means the human approved an edited call.
			h.approved = true
			h.call.by = rec.By
		case ended:
			l.settle(h)
			l.drop(h)
		}
	}
}

// decision holds a first decision that escalated.
func (l *learner) decision(rec *replay.Record) {
	var res struct {
		Action decision.Action `json:"action"`
	}
	if len(rec.Result) == 0 || json.Unmarshal(rec.Result, &res) != nil || res.Action != decision.Escalate {
		return
	}
	h := &held{masked: len(rec.Erased) > 0}
	c, err := readCall(rec)
	if err != nil {
		h.err = err.Error()
		c = &call{id: rec.ProposalID}
	}
	c.time = rec.Timestamp
	h.call = c
	for len(l.pending) >= l.opts.MaxPending {
		l.drop(l.order.Front().Value.(*held))
		l.res.Evicted++
	}
	h.elem = l.order.PushBack(h)
	l.pending[c.id] = h
}

func (l *learner) drop(h *held) {
	delete(l.pending, h.call.id)
	l.order.Remove(h.elem)
}

// settle learns from an escalation whose human part ended. A decline
// counts as one even when others approved (a quorum): any human's "no"
// is evidence against the pattern.
func (l *learner) settle(h *held) {
	if !h.approved && !h.declined {
		return // no human verdict: a timeout, a withdrawal
	}
	switch {
	case h.err != "":
		l.res.Other++
		return
	case h.masked && !h.declined:
		// The approved value of an erased argument is unknown. A masked
		// decline is still evidence against a pattern that covers what
		// is left of it.
		l.res.Masked++
		return
	}
	k := groupKey{h.call.proposer, h.call.tool, h.call.server}
	g := l.groups[k]
	if g == nil {
		if len(l.groups) >= l.opts.MaxGroups {
			l.res.GroupsFull++
			return
		}
		g = &group{key: k, order: len(l.groups), approvers: map[string]bool{}, args: map[string]*argStats{}}
		l.groups[k] = g
	}
	switch {
	case h.declined:
		l.res.Declined++
		g.declTotal++
		if len(g.declines) < maxDeclines {
			g.declines = append(g.declines, h.call)
		}
	case h.edited:
		l.res.Edited++
	default:
		l.res.Approved++
		g.add(h.call, l.opts.MaxCases)
	}
}

// add learns one approved call.
func (g *group) add(c *call, maxCases int) {
	if g.approvals == 0 || c.time.Before(g.first) {
		g.first = c.time
	}
	if c.time.After(g.last) {
		g.last = c.time
	}
	g.approvals++
	for _, who := range c.by {
		if len(g.approvers) < 100 {
			g.approvers[who] = true
		}
	}
	if len(g.ids) < MaxListedIDs {
		g.ids = append(g.ids, c.id)
	}
	if len(g.cases) < maxCases {
		g.cases = append(g.cases, c)
	}
	if !c.hasArgs {
		g.noArgs++
	}
	for name, raw := range c.args {
		st := g.args[name]
		if st == nil {
			st = &argStats{same: true, strings: true, dirOK: true, distinct: map[string]struct{}{}}
			g.args[name] = st
		}
		st.add(raw)
	}
}

func (st *argStats) add(raw json.RawMessage) {
	canon, err := jcs.Transform(raw)
	if err != nil {
		canon = raw
	}
	if st.present == 0 {
		st.first = canon
	} else if !bytes.Equal(canon, st.first) {
		st.same = false
	}
	st.present++
	if len(st.distinct) < maxDistinct {
		st.distinct[string(canon)] = struct{}{}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		st.strings = false
		return
	}
	if strings.Contains(s, "/") {
		st.slash = true
	}
	dir, ok := grants.Dir(s)
	if !ok || grants.Climbs(s) {
		st.dirOK = false
		return
	}
	if st.present == 1 {
		st.dir = dir
		return
	}
	st.dir = commonDir(st.dir, dir)
}

// commonDir is the longest directory both a and b lie in ("/srv/a/" and
// "/srv/b/" → "/srv/"): their common prefix cut back to a slash.
func commonDir(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:strings.LastIndexByte(a[:n], '/')+1]
}

// readCall reads the call a decision record's input describes.
func readCall(rec *replay.Record) (*call, error) {
	if len(rec.Input) == 0 {
		return nil, errors.New("no input")
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(rec.Input, &in); err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	var doc struct {
		Method string `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
		Proposer struct {
			ID string `json:"id"`
		} `json:"proposer"`
		Tool struct {
			Server string `json:"server"`
		} `json:"tool"`
	}
	// Keys exactly, as the policy and the tool owner read them (a decoy
	// "Arguments" must not become what a suggestion learns).
	if err := agent.Unmarshal(rec.Input, &doc); err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	if doc.Method != "tools/call" || doc.Params.Name == "" || doc.Proposer.ID == "" {
		return nil, errors.New("not a tools/call with a proposer and a tool name")
	}
	c := &call{id: rec.ProposalID, proposer: doc.Proposer.ID, tool: doc.Params.Name, server: doc.Tool.Server,
		input: map[string]json.RawMessage{}}
	if a := doc.Params.Arguments; len(a) > 0 && string(a) != "null" {
		if err := json.Unmarshal(a, &c.args); err != nil {
			return nil, fmt.Errorf("params.arguments: %w", err)
		}
		c.hasArgs = true
	}
	for _, k := range []string{"method", "params", "proposer", "tool"} {
		if v, ok := in[k]; ok {
			c.input[k] = v
		}
	}
	return c, nil
}

// suggest turns the groups with enough approvals into suggestions.
func (l *learner) suggest() {
	gs := slices.SortedFunc(maps.Values(l.groups), func(a, b *group) int { return a.order - b.order })
	names := map[string]bool{}
	for _, g := range gs {
		if g.approvals == 0 {
			continue
		}
		skip := func(reason string) {
			l.res.Skipped = append(l.res.Skipped, Skipped{Proposer: g.key.proposer, Tool: g.key.tool, Server: g.key.server,
				Approvals: g.approvals, Declines: g.declTotal, Reason: reason})
		}
		if g.approvals < l.opts.Min {
			skip(fmt.Sprintf("%d approvals, fewer than %d", g.approvals, l.opts.Min))
			continue
		}
		if g.declTotal > len(g.declines) {
			skip(fmt.Sprintf("%d declined calls, too many to check", g.declTotal))
			continue
		}
		args, err := g.pattern()
		if err != nil {
			skip(err.Error())
			continue
		}
		p := pattern{proposer: g.key.proposer, tool: g.key.tool, server: g.key.server, args: args}
		if d := firstCovered(p, g.declines); d != nil {
			skip(fmt.Sprintf("a human declined %s, which the pattern would cover", quote(d.id)))
			continue
		}
		s := Suggestion{
			Name:     uniqueName(names, g.key),
			Proposer: g.key.proposer, Tool: g.key.tool, Server: g.key.server,
			Approvals: g.approvals, Approvers: slices.Sorted(maps.Keys(g.approvers)),
			First: g.first, Last: g.last, ProposalIDs: g.ids, Declines: g.declTotal, Args: args,
		}
		s.Package = "fulfiller.suggested." + s.Name
		s.RuleFile, s.TestFile = s.Name+".rego", s.Name+"_test.rego"
		if err := render(l.opts.Rego, &s, p, g, l.opts.Source); err != nil {
			skip(fmt.Sprintf("cannot write the rule: %v", err))
			continue
		}
		l.res.Suggestions = append(l.res.Suggestions, s)
	}
}

// pattern generalises the group's approved arguments.
func (g *group) pattern() ([]Arg, error) {
	var args []Arg
	for _, name := range slices.Sorted(maps.Keys(g.args)) {
		st := g.args[name]
		a := Arg{Name: name, Distinct: len(st.distinct), Present: st.present, Optional: st.present < g.approvals}
		switch {
		case st.same:
			a.Kind, a.Value = Pinned, st.first
		case st.strings && st.slash:
			// A path: only a directory below the root is a pattern
			// that a human's approvals can be said to support.
			if !st.dirOK || st.dir == "" || st.dir == "/" {
				return nil, fmt.Errorf("arguments.%s: approved paths share no directory below the root (or have . or .. segments)", name)
			}
			a.Kind, a.Prefix = Prefix, st.dir
		default:
			a.Kind = Free
		}
		args = append(args, a)
	}
	return args, nil
}

// pattern is what a suggested rule matches, for checking calls in Go the
// way the generated Rego does (replay then checks the Rego itself).
type pattern struct {
	proposer, tool, server string
	args                   []Arg
}

// covers reports whether the rule would fulfil c.
func (p pattern) covers(c *call) bool {
	if c.proposer != p.proposer || c.tool != p.tool || c.server != p.server {
		return false
	}
	for name := range c.args {
		if !slices.ContainsFunc(p.args, func(a Arg) bool { return a.Name == name }) {
			return false
		}
	}
	for _, a := range p.args {
		raw, ok := c.args[a.Name]
		if !ok {
			if a.Optional {
				continue
			}
			return false
		}
		switch a.Kind {
		case Pinned:
			v, err := jcs.Transform(raw)
			if err != nil || !bytes.Equal(v, a.Value) {
				return false
			}
		case Prefix:
			var s string
			if json.Unmarshal(raw, &s) != nil || !strings.HasPrefix(s, a.Prefix) || grants.Climbs(s) {
				return false
			}
		}
	}
	return true
}

func firstCovered(p pattern, calls []*call) *call {
	for _, c := range calls {
		if p.covers(c) {
			return c
		}
	}
	return nil
}

// uniqueName derives a Rego identifier from the group: lower-case ASCII
// letters, digits and underscores, starting with a letter, numbered when
// two groups would share one. It always contains an underscore, so it is
// never a Rego keyword.
func uniqueName(taken map[string]bool, k groupKey) string {
	base := ident(k.proposer) + "_" + ident(k.tool)
	name := base
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	taken[name] = true
	return name
}

func ident(s string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			under = false
		} else if !under && b.Len() > 0 {
			b.WriteByte('_')
			under = true
		}
		if b.Len() >= 32 {
			break
		}
	}
	out := strings.TrimRight(b.String(), "_")
	if out == "" {
		return "x"
	}
	if out[0] >= '0' && out[0] <= '9' {
		out = "x" + out
	}
	return out
}
