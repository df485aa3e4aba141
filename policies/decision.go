package policies

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// The values a policy decides are package decision's, so that what only
// reads decisions (the approver's client, replay, suggest) need not link
// OPA. Code outside this package names them there; these aliases are the
// engine's own shorthand.
type (
	// Action is decision.Action: what the policy decided to do.
	Action = decision.Action
	// Decision is decision.Decision: the outcome of evaluating the policy
	// for one input.
	Decision = decision.Decision
	// MalformedDecisionError is decision.MalformedDecisionError: how a
	// policy's decision breaks the contract.
	MalformedDecisionError = decision.MalformedDecisionError
	// Grantable is decision.Grantable: an escalate decision's offer of a
	// grant.
	Grantable = decision.Grantable
	// GrantField is decision.GrantField: one field a grant pins.
	GrantField = decision.GrantField
	// Tier is decision.Tier: one step of an escalate decision's
	// escalate_to.
	Tier = decision.Tier
)

// The three actions a policy may decide (decision.Fulfill, …).
const (
	Fulfill  = decision.Fulfill
	Reject   = decision.Reject
	Escalate = decision.Escalate
)

// Reason codes a reject may carry on the wire (decision.ReasonPolicy, …).
const (
	ReasonPolicy         = decision.ReasonPolicy
	ReasonBusy           = decision.ReasonBusy
	ReasonIncapable      = decision.ReasonIncapable
	ReasonTimeout        = decision.ReasonTimeout
	ReasonInvalid        = decision.ReasonInvalid
	ReasonDuplicate      = decision.ReasonDuplicate
	ReasonResourceLimit  = decision.ReasonResourceLimit
	ReasonUnsafe         = decision.ReasonUnsafe
	ReasonDisagree       = decision.ReasonDisagree
	ReasonOther          = decision.ReasonOther
	ReasonInappropriate  = decision.ReasonInappropriate
	ReasonNoLongerNeeded = decision.ReasonNoLongerNeeded
)

// ValidReason reports whether code is a reject reason fulfiller may send
// (decision.ValidReason).
func ValidReason(code string) bool { return decision.ValidReason(code) }

// formatDuration prints durations the way people write them in policies
// (decision.FormatDuration).
func formatDuration(d time.Duration) string { return decision.FormatDuration(d) }

// malformed is a MalformedDecisionError naming field.
func malformed(field, format string, args ...any) error {
	return &MalformedDecisionError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ErrUndefinedDecision means no rule produced data.fulfiller.decision for
// the input.
var ErrUndefinedDecision = errors.New("undefined decision: no rule produced data.fulfiller.decision for this input")

// failClosed is the reject every broken evaluation turns into.
// BusyMessage is the message of a busy reject after two evaluations
// ran past the policy timeout.
const BusyMessage = "fulfiller is too loaded to decide this proposal now; propose it again"

func failClosed(revision string, err error) Decision {
	return Decision{
		Action:   Reject,
		Reason:   ReasonPolicy,
		Message:  "the policy could not decide this proposal",
		Revision: revision,
		Err:      err,
	}
}

// ParseDecision reads a decision document (JSON) with the same strict rules
// the engine applies to what a policy returns.
func ParseDecision(doc []byte) (Decision, error) {
	v, err := jsonToValue(doc)
	if err != nil {
		return Decision{}, fmt.Errorf("decision: %w", err)
	}
	return parseDecision(v)
}

// parseDecision validates what data.fulfiller.decision evaluated to.
// Everything the contract names is checked strictly, because the sidecar
// acts on it without a human in the loop: a typo must become a visible,
// fail-closed reject, not a silently different action.
func parseDecision(v ast.Value) (Decision, error) {
	obj, ok := v.(ast.Object)
	if !ok {
		return Decision{}, malformed("", "must be an object, got %s", ast.ValueName(v))
	}
	var d Decision
	var errs []error
	var quorumSet bool
	obj.Foreach(func(k, val *ast.Term) {
		key, ok := k.Value.(ast.String)
		if !ok {
			errs = append(errs, malformed("", "key %v is not a string", k))
			return
		}
		name := string(key)
		var err error
		switch name {
		case "action":
			var s string
			if s, err = stringField(name, val.Value); err == nil {
				switch Action(s) {
				case Fulfill, Reject, Escalate:
					d.Action = Action(s)
				default:
					err = malformed(name, "%q is not fulfill, reject or escalate", s)
				}
			}
		case "reason":
			d.Reason, err = stringField(name, val.Value)
		case "message":
			d.Message, err = stringField(name, val.Value)
		case "target":
			if d.Target, err = stringField(name, val.Value); err == nil && d.Target == "" {
				err = malformed(name, "must not be empty")
			}
		case "approvers":
			d.Approvers, err = stringList(name, val.Value)
			if err == nil {
				err = distinct(name, d.Approvers)
			}
		case "editable":
			d.Editable, err = stringList(name, val.Value)
		case "grantable":
			d.Grantable, err = parseGrantable(val.Value)
		case "quorum":
			d.Quorum, err = intField(name, val.Value)
			if err == nil && d.Quorum < 1 {
				err = malformed(name, "must be at least 1, got %d", d.Quorum)
			}
			quorumSet = true
		case "timeout":
			d.Timeout, err = durationField(name, val.Value)
		case "task":
			b, ok := val.Value.(ast.Boolean)
			if !ok {
				err = malformed(name, "must be true or false, got %s", ast.ValueName(val.Value))
			}
			d.Task = bool(b)
		case "task_timeout":
			d.TaskTimeout, err = durationField(name, val.Value)
		case "notify_arguments":
			b, ok := val.Value.(ast.Boolean)
			if !ok {
				err = malformed(name, "must be true or false, got %s", ast.ValueName(val.Value))
			}
			d.NotifyArguments = bool(b)
		case "reminders":
			d.Reminders, err = parseReminders(val.Value)
		case "escalate_to":
			d.EscalateTo, err = parseEscalateTo(val.Value)
		default:
			var x any
			if x, err = ast.JSON(val.Value); err != nil {
				err = malformed(name, "not representable as JSON: %v", err)
			} else {
				if d.Extra == nil {
					d.Extra = map[string]any{}
				}
				d.Extra[name] = x
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		// Report the first problem in key order, so that the message is the
		// same every time for the same decision.
		return Decision{}, errs[0]
	}
	if (d.Task || d.TaskTimeout != 0) && d.Action == Reject {
		field := "task"
		if !d.Task {
			field = "task_timeout"
		}
		return Decision{}, malformed(field, "only a fulfill or escalate decision may ask for a task, this one is reject")
	}
	if d.Grantable != nil && d.Action != Escalate {
		return Decision{}, malformed("grantable", "only an escalate decision may offer a grant, this one is %s", d.Action)
	}
	if d.NotifyArguments && d.Action != Escalate {
		// Only an escalation is announced to approvers; elsewhere the key
		// would promise something nothing does.
		return Decision{}, malformed("notify_arguments", "only an escalate decision notifies approvers, this one is %s", d.Action)
	}
	if d.Reminders != nil && d.Action != Escalate && d.Action != "" {
		return Decision{}, malformed("reminders", "only an escalate decision has prompts to remind of, this one is %s", d.Action)
	}
	if d.EscalateTo != nil && d.Action != Escalate && d.Action != "" {
		return Decision{}, malformed("escalate_to", "only an escalate decision has approvers to escalate to, this one is %s", d.Action)
	}
	if err := checkReaching(d); err != nil {
		return Decision{}, err
	}
	switch d.Action {
	case "":
		return Decision{}, malformed("action", "missing")
	case Reject:
		if d.Reason == "" {
			return Decision{}, malformed("reason", "a reject needs a reason code")
		}
		if !ValidReason(d.Reason) {
			return Decision{}, malformed("reason", "%q is not a reason code (policy, busy, incapable, timeout, invalid, duplicate, resource_limit, unsafe, disagree, other, inappropriate, no_longer_needed)", d.Reason)
		}
	case Escalate:
		if !quorumSet {
			d.Quorum = 1
		}
		if len(d.Approvers) > 0 && d.Quorum > len(d.Approvers) {
			return Decision{}, malformed("quorum", "%d approvals needed but only %d approvers named", d.Quorum, len(d.Approvers))
		}
	}
	return d, nil
}

// durationField reads a positive duration written as Go and OPA write
// them ("5m", "90s", "1h30m").
func durationField(name string, v ast.Value) (time.Duration, error) {
	s, err := stringField(name, v)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, malformed(name, "%q is not a duration such as \"5m\" or \"90s\"", s)
	}
	if d <= 0 {
		return 0, malformed(name, "must be positive, got %q", s)
	}
	return d, nil
}

func stringField(name string, v ast.Value) (string, error) {
	s, ok := v.(ast.String)
	if !ok {
		return "", malformed(name, "must be a string, got %s", ast.ValueName(v))
	}
	return string(s), nil
}

// stringList accepts an array or a set of strings: Rego policies naturally
// build approver lists as sets, which arrive sorted.
func stringList(name string, v ast.Value) ([]string, error) {
	var out []string
	var bad ast.Value
	add := func(t *ast.Term) {
		s, ok := t.Value.(ast.String)
		if !ok || s == "" {
			if bad == nil {
				bad = t.Value
			}
			return
		}
		out = append(out, string(s))
	}
	switch x := v.(type) {
	case *ast.Array:
		x.Foreach(add)
	case ast.Set:
		x.Foreach(add)
	default:
		return nil, malformed(name, "must be a list of strings, got %s", ast.ValueName(v))
	}
	if bad != nil {
		return nil, malformed(name, "must be a list of non-empty strings, found %v", bad)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

func distinct(name string, list []string) error {
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if seen[s] {
			return malformed(name, "%q is listed twice", s)
		}
		seen[s] = true
	}
	return nil
}

func intField(name string, v ast.Value) (int, error) {
	n, ok := v.(ast.Number)
	if !ok {
		return 0, malformed(name, "must be an integer, got %s", ast.ValueName(v))
	}
	if i, ok := n.Int(); ok {
		return i, nil
	}
	// Rego arithmetic can produce 2.0 for 2; accept whole numbers.
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		return 0, malformed(name, "must be an integer, got %s", n)
	}
	return int(f), nil
}
