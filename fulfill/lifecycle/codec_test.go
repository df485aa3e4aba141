package lifecycle

import (
	"encoding/json"
	"errors"
	"slices"
)

// fakeCodec is the tests' Codec: a prompt's payload is its spec as JSON
// (what the real one's form would offer), and an answer's payload a
// fakeAnswer, verified against the key set as elicit's codec does
// (a keyed approver's answer must be signed; an error answer cannot
// be; a prompt asked while its approver was keyed stays signed-only).
type fakeCodec struct{}

// fakeAnswer is an answer payload the fake codec reads.
type fakeAnswer struct {
	Action     string          `json:"action"`
	Approve    bool            `json:"approve"`
	Params     json.RawMessage `json:"params,omitempty"`
	DelegateTo string          `json:"delegate_to,omitempty"`
	Grant      string          `json:"grant,omitempty"`
	Signed     bool            `json:"signed,omitempty"`
	Error      string          `json:"error,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Bad        bool            `json:"bad,omitempty"` // an edit the form refuses
}

// fakeKeys is a key set: the approvers keyed.
type fakeKeys []string

func (k fakeKeys) Has(a string) bool { return slices.Contains(k, a) }

// errUnsignable: the fake codec cannot sign a prompt to this approver.
var errUnsignable = errors.New("cannot sign")

func (fakeCodec) Prompt(p *Proposal, spec PromptSpec) (json.RawMessage, error) {
	if spec.Approver == "unsignable" {
		return nil, errUnsignable
	}
	return json.Marshal(struct {
		Proposal string `json:"proposal"`
		PromptSpec
	}{p.ID, spec})
}

func (fakeCodec) Read(p *Proposal, pr Prompt, payload json.RawMessage, keys KeySet) Verified {
	var a fakeAnswer
	if json.Unmarshal(payload, &a) != nil {
		return Verified{Why: "payload is not a JSON-RPC response"}
	}
	keyed := keys != nil && keys.Has(pr.Approver)
	if !keyed && pr.Signed {
		return Verified{Why: pr.Approver + "'s key was removed after they were asked: the answer cannot be verified"}
	}
	if a.Error != "" {
		if keyed {
			return Verified{Why: "an error answer cannot be signed, and " + pr.Approver + " must sign"}
		}
		return Verified{Kind: AnswerFailed, Why: a.Error}
	}
	if keyed && !a.Signed {
		return Verified{Kind: AnswerForgery, Action: a.Action, Why: "unsigned"}
	}
	v := Verified{Action: a.Action, Reason: a.Reason, DelegateTo: a.DelegateTo}
	switch {
	case a.Action == "cancel":
		v.Kind = AnswerCancelled
	case a.Action == "decline" || (a.DelegateTo == "" && !a.Approve):
		v.Kind = AnswerDeclined
	case a.DelegateTo != "":
		v.Kind = AnswerDelegated
	default:
		v.Kind = AnswerApproved
		v.Params, v.Key = a.Params, string(a.Params)
		if a.Bad {
			v.Unusable = "the edit is not valid"
		}
		v.Content, _ = json.Marshal(struct {
			Params json.RawMessage `json:"params,omitempty"`
			Grant  string          `json:"grant,omitempty"`
		}{a.Params, a.Grant})
		v.Grant, v.GrantRaw = a.Grant, `"`+a.Grant+`"`
		if keyed {
			v.Signed, v.Request, v.Signature = true, pr.EnvelopeID, "sig"
		}
	}
	return v
}

func (fakeCodec) Recount(p *Proposal, a Approval) (json.RawMessage, string, error) {
	var c struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(a.Content, &c); err != nil {
		return nil, "", err
	}
	return c.Params, string(c.Params), nil
}

func (fakeCodec) Offers(payload json.RawMessage) (delegates, grants []string) {
	var spec PromptSpec
	_ = json.Unmarshal(payload, &spec)
	return spec.Delegates, spec.Grants
}

// answerOf is the payload of an answer.
func answerOf(a fakeAnswer) json.RawMessage {
	b, _ := json.Marshal(a)
	return b
}
