package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// proposalJSON is Proposal without its methods: how a record is encoded.
type proposalJSON Proposal

// recordJSON is the encoded record: the Proposal's fields, and Params
// under its own key only when the record has no envelope to read it from.
type recordJSON struct {
	*proposalJSON
	Params json.RawMessage `json:"params,omitempty"`
}

// MarshalJSON encodes p as the record the store keeps. Params is left out
// when p carries its envelope: it is what the envelope's payload.params
// says (a slice of it, as the shell read it), and storing it twice would
// double a large call's record.
func (p Proposal) MarshalJSON() ([]byte, error) {
	p.V = RecordVersion
	r := recordJSON{proposalJSON: (*proposalJSON)(&p)}
	if len(p.Envelope) == 0 {
		r.Params = p.Params
	}
	return json.Marshal(r)
}

// UnmarshalJSON decodes a record MarshalJSON wrote. A record whose Params
// was left out gets it from its envelope again, read with keys matched
// exactly as the shell's parser matched them (the envelope was validated
// when it was read: its keys are unique); an invalid proposal's stays
// nil, as the parser left it.
//
// A record without a version was written before RecordVersion: it is read
// into what the store and the core need to know of it at once (ids,
// owner, claim, phase, deadline, what is committed), with V 0 and its
// bytes in Legacy; the shell completes it (its decision, what its payload
// says) before the core takes it up.
func (p *Proposal) UnmarshalJSON(b []byte) error {
	v, err := jsonMember(b, "v")
	if err != nil {
		return err
	}
	if v == nil {
		return p.readLegacy(b)
	}
	r := recordJSON{proposalJSON: (*proposalJSON)(p)}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	p.Params = r.Params
	if p.Params == nil && len(p.Envelope) > 0 && p.Invalid == "" {
		params, err := payloadParams(p.Envelope)
		if err != nil {
			return errors.Join(errors.New("lifecycle: record envelope"), err)
		}
		p.Params = params
	}
	return nil
}

// payloadParams is envelope's payload.params as written (a slice of
// envelope), nil when there is none.
func payloadParams(envelope []byte) (json.RawMessage, error) {
	payload, err := jsonMember(envelope, "payload")
	if err != nil || payload == nil {
		return nil, err
	}
	if k := jsontext.Value(payload).Kind(); k != '{' {
		return nil, nil
	}
	return jsonMember(payload, "params")
}

// jsonMember is the value of key in the JSON object obj (a slice of obj), nil
// when obj has no such key. Keys are matched exactly.
func jsonMember(obj []byte, key string) (json.RawMessage, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(obj), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	if tok.Kind() != '{' {
		return nil, errors.New("not a JSON object")
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		if name.String() != key {
			if err := dec.SkipValue(); err != nil {
				return nil, err
			}
			continue
		}
		start := dec.InputOffset()
		if err := dec.SkipValue(); err != nil {
			return nil, err
		}
		v := bytes.TrimLeft(obj[start:dec.InputOffset()], " \t\r\n:")
		return json.RawMessage(v), nil
	}
	return nil, nil
}

// legacyRecord is the layout of records written before RecordVersion
// (fulfiller up to b7920f5, state.Pending), as far as it is read here;
// its decision is left to the shell (Proposal.Legacy).
type legacyRecord struct {
	ProposalID       string          `json:"proposal_id"`
	Envelope         json.RawMessage `json:"envelope"`
	Proposer         string          `json:"proposer"`
	Received         time.Time       `json:"received"`
	Size             int             `json:"size"`
	DecisionID       string          `json:"decision_id"`
	Phase            Phase           `json:"phase"`
	Owner            string          `json:"owner"`
	Claim            string          `json:"claim"`
	ApprovalDeadline time.Time       `json:"approval_deadline"`
	FulfilDeadline   time.Time       `json:"fulfil_deadline"`
	Deadline         time.Time       `json:"deadline"`
	Addressee        string          `json:"addressee"`
	Prompts          []Prompt        `json:"prompts"`
	Approvals        []Approval      `json:"approvals"`
	Request          *Request        `json:"request"`
	Task             *TaskRecord     `json:"task"`
	Reject           *RejectRecord   `json:"reject"`
	Relay            *RelayRecord    `json:"relay"`
}

// readLegacy reads a record written before RecordVersion (see
// UnmarshalJSON). Its Deadline is the record's, else its phase's as that
// layout kept it (approval, fulfilment, task); a record older still has
// none, and the shell dates it.
func (p *Proposal) readLegacy(b []byte) error {
	var r legacyRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*p = Proposal{
		ID: r.ProposalID, From: r.Proposer, Envelope: r.Envelope, Received: r.Received, Size: r.Size,
		Addressee: r.Addressee, Owner: r.Owner, Phase: r.Phase, Deadline: r.Deadline,
		DecisionID: r.DecisionID, Claim: r.Claim,
		Prompts: r.Prompts, Approvals: r.Approvals,
		Request: r.Request, Task: r.Task, Reject: r.Reject, Relay: r.Relay,
		Legacy: b,
	}
	if p.Deadline.IsZero() {
		switch {
		case r.Phase == AwaitingApproval:
			p.Deadline = r.ApprovalDeadline
		case r.Phase == Fulfilling:
			p.Deadline = r.FulfilDeadline
		case r.Phase == Task && r.Task != nil:
			p.Deadline = r.Task.Deadline
		}
	}
	if len(r.Envelope) > 0 {
		params, err := payloadParams(r.Envelope)
		if err != nil {
			return errors.Join(errors.New("lifecycle: record envelope"), err)
		}
		p.Params = params
	}
	return nil
}
