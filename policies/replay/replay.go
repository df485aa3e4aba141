// Package replay re-decides the proposals of a recorded decision log with
// a candidate policy and reports what would change: how many decisions
// move from one action to another, which proposals change, and — where a
// human answered an escalation — how the candidate scores against the
// humans (docs/design.md "Grants": progressive automation needs evidence before a
// policy author widens a policy).
//
// Each proposal's first decision record is decided again from the input it
// recorded (its "input" field, evaluated as it is by a Decider, such as
// policies.Engine.DecideJSON), so "now", pending counts and
// participants are as they were. Masked inputs (the record's "erased"
// paths) are replayed as recorded, without the erased values; the report
// counts them because their new decision may differ for that reason alone.
//
// Replay streams: lines are read one at a time and only the proposals
// still waiting for their human answer or outcome are kept, in a map
// bounded by Options.MaxPending. When it is full the oldest proposal is
// evicted (its human answer, if one comes, is not scored) and counted.
package replay

import (
	"bufio"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog/logrecord"
)

// Decider decides recorded inputs with the candidate policy.
// *policies.Engine is one; replay takes this interface, not the engine,
// so that it does not link the policy engine itself (docs/design.md
// "Layout": dependencies point one way).
type Decider interface {
	// Revision names the policy set that decides, for the report.
	Revision() string
	// DecideJSON decides a complete input document, given as JSON, as it
	// is. An error means input is no input document (not a JSON
	// object): nothing was decided. A policy that cannot decide is a
	// fail-closed reject with Err set, not an error.
	DecideJSON(ctx context.Context, input []byte) (decision.Decision, error)
}

// Defaults for Options.
const (
	// DefaultMaxPending bounds the proposals awaiting their human answer
	// or outcome. A proposal in the map costs about 200 bytes plus its
	// ids, so the default stays near 16 MiB.
	DefaultMaxPending = 65536
	// DefaultMaxLine is the longest decision-log line read; longer lines
	// are counted as malformed. Inputs are bounded by the sidecar's frame
	// limit, so a real line is far shorter.
	DefaultMaxLine = 16 << 20
	// MaxMalformedListed is how many malformed lines the report lists by
	// number (all are counted).
	MaxMalformedListed = 5
)

// Options tune a replay.
type Options struct {
	// MaxPending bounds the proposals held while they wait for a human
	// answer or an outcome [DefaultMaxPending].
	MaxPending int
	// MaxLine is the longest line read [DefaultMaxLine].
	MaxLine int
	// OnChange, when set, is called for every replayed decision whose
	// action differs from the recorded one, in log order, as soon as it
	// is known: output can stream instead of holding every change.
	OnChange func(Change) error
	// OnProgress, when set, is called every ProgressEvery lines and at the
	// end with the lines and bytes read so far.
	OnProgress func(lines, bytes int64)
	// ProgressEvery is how many lines pass between OnProgress calls
	// [10000].
	ProgressEvery int64
}

// Verdict is one decision as the report shows it.
type Verdict struct {
	Action  decision.Action `json:"action"`
	Reason  string          `json:"reason,omitempty"`
	Message string          `json:"message,omitempty"`
	Error   string          `json:"error,omitempty"` // the decision failed closed (reject/policy) because of this
}

// Change is one proposal whose replayed decision differs from the recorded
// one.
type Change struct {
	Line        int64   `json:"line"` // of the decision record, from 1
	ProposalID  string  `json:"proposal_id"`
	DecisionID  string  `json:"decision_id"`
	Proposer    string  `json:"proposer,omitempty"`
	Tool        string  `json:"tool,omitempty"`
	Old         Verdict `json:"old"`
	New         Verdict `json:"new"`
	Masked      bool    `json:"masked,omitempty"`      // the replayed input had erased values
	Reevaluated bool    `json:"reevaluated,omitempty"` // a decision asked again after a human edited the call
}

// Transition counts the decisions that went from one action to another
// (or stayed).
type Transition struct {
	Old   decision.Action `json:"old"`
	New   decision.Action `json:"new"`
	Count int64           `json:"count"`
}

// Humans scores the candidate against the escalations a human answered.
type Humans struct {
	Answered int64 `json:"answered"` // escalations with a human verdict (approved + declined)
	Approved int64 `json:"approved"` // the humans approved (the proposal's "approved" outcome)
	Declined int64 `json:"declined"` // a human declined (an approval record with approve false)
	// Agreements: the candidate fulfils what humans approved, or rejects
	// what a human declined.
	Agreements int64 `json:"agreements"`
	// FalseApprovals: the candidate would fulfil what a human declined.
	FalseApprovals int64 `json:"false_approvals"`
	// NeedlessAsks: the candidate would escalate or reject what humans
	// approved.
	NeedlessAsks int64 `json:"needless_asks"`
	// AskedAgain: the candidate would escalate what a human declined —
	// still safe, the human would be asked again.
	AskedAgain int64 `json:"asked_again"`
}

// Reevaluations summarises the decisions asked again after a human edited
// the call (reevaluated true). They are replayed apart from the first
// decisions: their input carries the human's answer, and counting them
// with the first decisions would count a proposal twice.
type Reevaluations struct {
	Replayed    int64        `json:"replayed"`
	Changed     int64        `json:"changed"`
	Transitions []Transition `json:"transitions"`
}

// Malformed counts lines that are no decision-log record.
type Malformed struct {
	Count int64           `json:"count"`
	First []MalformedLine `json:"first"` // the first MaxMalformedListed
}

// MalformedLine is one unreadable line.
type MalformedLine struct {
	Line  int64  `json:"line"`
	Error string `json:"error"`
}

// Pending reports the bounded map of proposals awaiting an answer.
type Pending struct {
	Max int `json:"max"` // the bound (Options.MaxPending)
	// Peak is the most proposals held at once.
	Peak int `json:"peak"`
	// Evicted proposals were dropped to stay within Max: a human answer
	// or outcome that came later for them is not scored.
	Evicted int64 `json:"evicted"`
	// Unfinished proposals had no ending outcome by the end of the log
	// (still escalated, or the log was cut).
	Unfinished int64 `json:"unfinished"`
}

// Report is what a replay found. Its JSON form is the document
// `fulfiller replay --format json` prints (after the changes).
type Report struct {
	Revision string `json:"revision"` // the candidate policy's revision
	Lines    int64  `json:"lines"`    // lines read
	// Replayed counts the first decisions of proposals decided again.
	Replayed int64 `json:"replayed"`
	// Changed counts those whose action differs.
	Changed     int64        `json:"changed"`
	Transitions []Transition `json:"transitions"` // sorted by old, then new action
	// Masked counts replayed first decisions whose recorded input had
	// erased values; MaskedChanged those of them that changed.
	Masked        int64 `json:"masked"`
	MaskedChanged int64 `json:"masked_changed"`
	// NewErrors counts replayed decisions (first and reevaluated) where
	// the candidate policy failed closed.
	NewErrors     int64         `json:"new_errors"`
	Humans        Humans        `json:"humans"`
	Reevaluations Reevaluations `json:"reevaluations"`
	// Duplicates counts further non-reevaluated decision records of a
	// proposal still held (only its first is replayed).
	Duplicates int64 `json:"duplicates"`
	// NoInput counts decision records without a usable input (for
	// example a record the sidecar could not encode): nothing to replay.
	NoInput   int64     `json:"no_input"`
	Malformed Malformed `json:"malformed"`
	Pending   Pending   `json:"pending"`

	first, reeval map[[2]decision.Action]int64
}

// proposal is what is kept of one proposal until it ends.
type proposal struct {
	id       string
	old, new decision.Action
	declined bool // a human declined
	elem     *list.Element
}

// replayer holds one run's state.
type replayer struct {
	ctx     context.Context
	engine  Decider
	opts    Options
	rep     *Report
	pending map[string]*proposal
	order   *list.List // oldest first, for eviction
}

// Replay reads a decision log from r and re-decides its proposals with
// engine. Malformed lines are counted, never fatal; the error is a read
// error of r, ctx's, or OnChange's.
func Replay(ctx context.Context, r io.Reader, engine Decider, opts Options) (*Report, error) {
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 10000
	}
	rp := &replayer{
		ctx: ctx, engine: engine, opts: opts,
		rep: &Report{
			Revision:  engine.Revision(),
			Malformed: Malformed{First: []MalformedLine{}},
			Pending:   Pending{Max: opts.MaxPending},
			first:     map[[2]decision.Action]int64{},
			reeval:    map[[2]decision.Action]int64{},
		},
		pending: map[string]*proposal{},
		order:   list.New(),
	}
	err := rp.run(r)
	rp.finish()
	return rp.rep, err
}

func (rp *replayer) run(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var n, read int64
	for {
		if err := rp.ctx.Err(); err != nil {
			return err
		}
		b, size, tooLong, err := ReadLine(br, rp.opts.MaxLine)
		if size == 0 && err == io.EOF {
			break
		}
		n++
		read += size
		if err != nil && err != io.EOF {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if tooLong {
			rp.malformed(n, fmt.Errorf("longer than %d bytes", rp.opts.MaxLine))
		} else if err := rp.line(n, b); err != nil {
			return err
		}
		if rp.opts.OnProgress != nil && n%rp.opts.ProgressEvery == 0 {
			rp.opts.OnProgress(n, read)
		}
		if err == io.EOF {
			break
		}
	}
	rp.rep.Lines = n
	if rp.opts.OnProgress != nil {
		rp.opts.OnProgress(n, read)
	}
	return nil
}

// ReadLine reads one line of at most max bytes (and its newline), and says
// how many bytes it consumed. A longer line is consumed and reported as
// tooLong, so one giant line cannot exhaust memory. At the end of the
// input it returns io.EOF, with the last line if it had no newline.
func ReadLine(br *bufio.Reader, max int) (b []byte, size int64, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		size += int64(len(chunk))
		if !tooLong {
			if len(buf)+len(chunk) > max+1 {
				tooLong, buf = true, nil
			} else if err == bufio.ErrBufferFull || buf != nil {
				buf = append(buf, chunk...)
			} else {
				buf = chunk
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLong {
			return nil, size, true, err
		}
		return buf, size, false, err
	}
}

func (rp *replayer) malformed(n int64, err error) {
	m := &rp.rep.Malformed
	m.Count++
	if len(m.First) < MaxMalformedListed {
		m.First = append(m.First, MalformedLine{Line: n, Error: err.Error()})
	}
}

// line handles one line of the log.
func (rp *replayer) line(n int64, b []byte) error {
	rec, err := DecodeRecord(b)
	if err != nil {
		rp.malformed(n, err)
		return nil
	}
	if rec == nil {
		return nil // a blank line (a trailing newline) is no record
	}
	if rec.ProposalID == "" {
		// An ignored frame may have had no id; a decision must have one.
		if rec.Type == logrecord.TypeDecision {
			rp.malformed(n, errors.New(`decision without "proposal_id"`))
		}
		return nil
	}
	switch rec.Type {
	case logrecord.TypeDecision:
		return rp.decision(n, rec)
	case logrecord.TypeApproval:
		if p := rp.pending[rec.ProposalID]; p != nil && HumanDeclined(rec) {
			p.declined = true
		}
	case logrecord.TypeOutcome:
		rp.outcome(rec)
	}
	return nil
}

// outcome settles a held proposal when its outcome ends the human part.
func (rp *replayer) outcome(rec *Record) {
	p := rp.pending[rec.ProposalID]
	if p == nil {
		return
	}
	ended, approved := Ends(rec.Stage)
	if !ended {
		return // escalated: still waiting
	}
	rp.score(p, approved, !approved && p.declined)
	rp.drop(p)
}

// score counts one proposal's candidate decision against the humans.
func (rp *replayer) score(p *proposal, approved, declined bool) {
	if p.old != decision.Escalate {
		return
	}
	h := &rp.rep.Humans
	switch {
	case approved:
		h.Answered++
		h.Approved++
		if p.new == decision.Fulfill {
			h.Agreements++
		} else {
			h.NeedlessAsks++
		}
	case declined:
		h.Answered++
		h.Declined++
		switch p.new {
		case decision.Fulfill:
			h.FalseApprovals++
		case decision.Reject:
			h.Agreements++
		default:
			h.AskedAgain++
		}
	}
}

func (rp *replayer) drop(p *proposal) {
	delete(rp.pending, p.id)
	rp.order.Remove(p.elem)
}

// decision replays one decision record.
func (rp *replayer) decision(n int64, rec *Record) error {
	held := rp.pending[rec.ProposalID]
	if !rec.Reevaluated && held != nil {
		rp.rep.Duplicates++
		return nil
	}
	old, err := oldVerdict(rec)
	if err != nil {
		rp.malformed(n, err)
		return nil
	}
	if len(rec.Input) == 0 || string(rec.Input) == "null" {
		rp.rep.NoInput++
		return nil
	}
	d, err := rp.engine.DecideJSON(rp.ctx, rec.Input)
	if err != nil {
		rp.rep.NoInput++
		return nil
	}
	if err := rp.ctx.Err(); err != nil {
		return err // a cancelled evaluation is a fail-closed reject, not a finding
	}
	nv := Verdict{Action: d.Action, Reason: d.Reason, Message: d.Message}
	if d.Err != nil {
		nv.Error = strings.TrimSpace(d.Err.Error())
		rp.rep.NewErrors++
	}
	masked := len(rec.Erased) > 0
	changed := nv.Action != old.Action
	key := [2]decision.Action{old.Action, nv.Action}
	if rec.Reevaluated {
		re := &rp.rep.Reevaluations
		re.Replayed++
		rp.rep.reeval[key]++
		if changed {
			re.Changed++
		}
	} else {
		rp.rep.Replayed++
		rp.rep.first[key]++
		if masked {
			rp.rep.Masked++
		}
		if changed {
			rp.rep.Changed++
			if masked {
				rp.rep.MaskedChanged++
			}
		}
		rp.hold(&proposal{id: rec.ProposalID, old: old.Action, new: nv.Action})
	}
	if changed && rp.opts.OnChange != nil {
		return rp.opts.OnChange(Change{
			Line: n, ProposalID: rec.ProposalID, DecisionID: rec.DecisionID,
			Proposer: rec.Proposer, Tool: rec.Tool, Old: old, New: nv,
			Masked: masked, Reevaluated: rec.Reevaluated,
		})
	}
	return nil
}

// hold keeps p until its outcome, evicting the oldest held proposal when
// the map is full.
func (rp *replayer) hold(p *proposal) {
	for len(rp.pending) >= rp.opts.MaxPending {
		oldest := rp.order.Front().Value.(*proposal)
		rp.drop(oldest)
		rp.rep.Pending.Evicted++
	}
	p.elem = rp.order.PushBack(p)
	rp.pending[p.id] = p
	if len(rp.pending) > rp.rep.Pending.Peak {
		rp.rep.Pending.Peak = len(rp.pending)
	}
}

// finish scores what is still held (a decline with no outcome yet still
// counts) and fills the sorted tables.
func (rp *replayer) finish() {
	for e := rp.order.Front(); e != nil; e = e.Next() {
		p := e.Value.(*proposal)
		rp.score(p, false, p.declined)
		rp.rep.Pending.Unfinished++
	}
	rp.rep.Transitions = transitions(rp.rep.first)
	rp.rep.Reevaluations.Transitions = transitions(rp.rep.reeval)
}

// actionOrder sorts actions from most to least permissive.
var actionOrder = map[decision.Action]int{decision.Fulfill: 0, decision.Escalate: 1, decision.Reject: 2}

func transitions(m map[[2]decision.Action]int64) []Transition {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b [2]decision.Action) int {
		for i := range 2 {
			if c := rankOf(a[i]) - rankOf(b[i]); c != 0 {
				return c
			}
			if c := strings.Compare(string(a[i]), string(b[i])); c != 0 {
				return c
			}
		}
		return 0
	})
	out := make([]Transition, 0, len(keys))
	for _, k := range keys {
		out = append(out, Transition{Old: k[0], New: k[1], Count: m[k]})
	}
	return out
}

func rankOf(a decision.Action) int {
	if r, ok := actionOrder[a]; ok {
		return r
	}
	return len(actionOrder)
}

// loggedDecision is what replay reads of a logged decision.
type loggedDecision struct {
	Action  decision.Action `json:"action"`
	Reason  string          `json:"reason"`
	Message string          `json:"message"`
}

// oldVerdict is the decision a record logged. A record whose decision
// failed closed logged reject/policy with its error.
func oldVerdict(rec *Record) (Verdict, error) {
	var res loggedDecision
	if len(rec.Result) > 0 && string(rec.Result) != "null" {
		if err := json.Unmarshal(rec.Result, &res); err != nil {
			return Verdict{}, fmt.Errorf("result: %w", err)
		}
	}
	v := Verdict{Action: res.Action, Reason: res.Reason, Message: res.Message, Error: rec.Error}
	if v.Action == "" {
		if rec.Error == "" {
			return Verdict{}, errors.New("decision record without result or error")
		}
		// Fail closed, as the sidecar did.
		v.Action, v.Reason = decision.Reject, decision.ReasonPolicy
	}
	return v, nil
}
