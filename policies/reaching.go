package policies

import (
	"fmt"
	"slices"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// parseReminders reads a decision's reminders: a list (or set) of
// positive durations after the escalation started, each at most once.
// They are returned shortest first, so that the escalation can walk them in
// order whatever order the policy wrote (a Rego set sorts "10m" before
// "2m").
func parseReminders(v ast.Value) ([]time.Duration, error) {
	const name = "reminders"
	var terms []*ast.Term
	switch x := v.(type) {
	case *ast.Array:
		x.Foreach(func(t *ast.Term) { terms = append(terms, t) })
	case ast.Set:
		x.Foreach(func(t *ast.Term) { terms = append(terms, t) })
	default:
		return nil, malformed(name, "must be a list of durations such as [\"10m\"], got %s", ast.ValueName(v))
	}
	out := make([]time.Duration, 0, len(terms))
	for _, t := range terms {
		d, err := durationField(name, t.Value)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, d) {
			return nil, malformed(name, "%s is listed twice", formatDuration(d))
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out, nil
}

// parseEscalateTo reads a decision's escalate_to: a list of tiers, each
// {"after": DURATION, "approvers": [ID, …]}, in strictly increasing
// after, no approver named twice across the tiers.
func parseEscalateTo(v ast.Value) ([]Tier, error) {
	const name = "escalate_to"
	arr, ok := v.(*ast.Array)
	if !ok {
		return nil, malformed(name, "must be a list of {\"after\": …, \"approvers\": […]} objects, got %s", ast.ValueName(v))
	}
	var out []Tier
	var err error
	seen := map[string]bool{}
	arr.Foreach(func(t *ast.Term) {
		if err != nil {
			return
		}
		field := fmt.Sprintf("%s[%d]", name, len(out))
		var tier Tier
		if tier, err = parseTier(field, t.Value); err != nil {
			return
		}
		if n := len(out); n > 0 && tier.After <= out[n-1].After {
			err = malformed(field+".after", "%s is not after the previous tier's %s: tiers come in increasing after", formatDuration(tier.After), formatDuration(out[n-1].After))
			return
		}
		for _, a := range tier.Approvers {
			if seen[a] {
				err = malformed(field+".approvers", "%q is already in an earlier tier", a)
				return
			}
			seen[a] = true
		}
		out = append(out, tier)
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []Tier{}
	}
	return out, nil
}

// parseTier reads one tier object strictly; field names it in errors.
func parseTier(field string, v ast.Value) (Tier, error) {
	obj, ok := v.(ast.Object)
	if !ok {
		return Tier{}, malformed(field, "must be an object with after and approvers, got %s", ast.ValueName(v))
	}
	var t Tier
	var errs []error
	var haveAfter, haveApprovers bool
	obj.Foreach(func(k, val *ast.Term) {
		key, _ := k.Value.(ast.String)
		var err error
		switch string(key) {
		case "after":
			haveAfter = true
			t.After, err = durationField(field+".after", val.Value)
		case "approvers":
			haveApprovers = true
			if t.Approvers, err = stringList(field+".approvers", val.Value); err == nil {
				if len(t.Approvers) == 0 {
					err = malformed(field+".approvers", "must name at least one approver")
				} else {
					err = distinct(field+".approvers", t.Approvers)
				}
			}
		default:
			err = malformed(field, "unknown key %v (want after and approvers)", k)
		}
		if err != nil {
			errs = append(errs, err)
		}
	})
	switch {
	case len(errs) > 0:
		return Tier{}, errs[0]
	case !haveAfter:
		return Tier{}, malformed(field+".after", "missing")
	case !haveApprovers:
		return Tier{}, malformed(field+".approvers", "missing")
	}
	return t, nil
}

// checkReaching applies the rules between reminders, escalate_to and the
// rest of an escalate decision: each time falls before the decision's
// timeout (when it sets one: the sidecar's --approval-timeout or the
// proposer's sooner deadline is only known when it runs, and a time not
// before it is then never reached), and a tier does not name an approver
// the decision already asks.
func checkReaching(d Decision) error {
	if d.Timeout > 0 {
		for _, r := range d.Reminders {
			if r >= d.Timeout {
				return malformed("reminders", "%s is not before the timeout %s: the prompt has ended by then", formatDuration(r), formatDuration(d.Timeout))
			}
		}
		for i, t := range d.EscalateTo {
			if t.After >= d.Timeout {
				return malformed(fmt.Sprintf("escalate_to[%d].after", i), "%s is not before the timeout %s: the prompt has ended by then", formatDuration(t.After), formatDuration(d.Timeout))
			}
		}
	}
	for i, t := range d.EscalateTo {
		for _, a := range t.Approvers {
			if slices.Contains(d.Approvers, a) {
				return malformed(fmt.Sprintf("escalate_to[%d].approvers", i), "%q is already an approver of the escalation", a)
			}
		}
	}
	return nil
}
