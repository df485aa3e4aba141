package policies

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// Error codes of the contract checks, in the place OPA's rego_*_error
// codes stand, so that they read and sort like compile errors.
const (
	ContractError   = "fulfiller_contract_error"
	ContractWarning = "fulfiller_contract_warning"
)

// decisionRef is the rule every policy set must produce.
var decisionRef = ast.MustParseRef(Query)

// contractProblems checks a module statically against the decision
// contract (docs/design.md "Policy contract"), as far as the policy writes its
// decisions down literally:
//
//   - the value of a rule of data.fulfiller.decision that is an object
//     literal (in the head, or a variable the body binds to one with := or
//     =), and every else branch and default of it;
//   - any other object literal that looks like a decision: an "action" key
//     whose value is fulfill, reject or escalate, or an "action" key next
//     to another key of the contract.
//
// Every key whose value is a constant is read by the same code that reads
// a decision at run time (parseDecision), so check and the sidecar cannot
// disagree about what is malformed. Values computed at run time (data
// lookups, sprintf, other rules) are not known here: a decision assembled
// by another rule (decision := quotas.deny) is checked where its object is
// written, and a value only known at run time is checked at run time, when
// a malformed decision fails closed.
//
// Unknown keys are warnings (the sidecar keeps them for the decision log),
// errors when strict.
func contractProblems(m *ast.Module, strict bool) (errs, warns ast.Errors) {
	checked := map[*ast.Term]bool{}
	report := func(code string, loc *ast.Location, msg string) {
		e := ast.NewError(code, loc, "%s", msg)
		if code == ContractWarning {
			warns = append(warns, e)
		} else {
			errs = append(errs, e)
		}
	}
	check := func(obj *ast.Term, isDecision bool) {
		if checked[obj] {
			return
		}
		checked[obj] = true
		checkDecisionObject(obj, isDecision, strict, report)
	}

	ast.WalkRules(m, func(r *ast.Rule) bool {
		if !m.Package.Path.Extend(r.Head.Ref()).Equal(decisionRef) || r.Head.Value == nil {
			return false
		}
		if obj := decisionObject(r); obj != nil {
			check(obj, true)
		}
		return false
	})
	ast.WalkTerms(m, func(t *ast.Term) bool {
		if obj, ok := t.Value.(ast.Object); ok && looksLikeDecision(obj) {
			check(t, false)
		}
		return false
	})
	return errs, warns
}

// decisionObject is the object literal a decision rule produces: its head
// value, or the object its body binds the head's variable to; nil when the
// rule computes its value some other way.
func decisionObject(r *ast.Rule) *ast.Term {
	v := r.Head.Value
	switch x := v.Value.(type) {
	case ast.Object:
		return v
	case ast.Var:
		var found *ast.Term
		for _, expr := range r.Body {
			if !expr.IsAssignment() && !expr.IsEquality() {
				continue
			}
			lhs, rhs := expr.Operand(0), expr.Operand(1)
			if lhs.Equal(ast.NewTerm(x)) {
				if _, ok := rhs.Value.(ast.Object); ok {
					found = rhs
				}
			}
		}
		return found
	}
	return nil
}

// looksLikeDecision: an "action" key with a decision's action, or with
// another key of the contract beside it.
func looksLikeDecision(obj ast.Object) bool {
	action := obj.Get(ast.InternedTerm("action"))
	if action == nil {
		return false
	}
	if s, ok := action.Value.(ast.String); ok {
		switch Action(s) {
		case Fulfill, Reject, Escalate:
			return true
		}
	}
	for _, k := range decision.Fields {
		if k != "action" && obj.Get(ast.InternedTerm(k)) != nil {
			return true
		}
	}
	return false
}

// checkDecisionObject reports what parseDecision would refuse in the
// constant parts of obj. Each constant key is checked on its own (beside a
// stand-in action), so that every mistake is reported, not only the first;
// when the whole object is constant it is also checked whole, which
// catches the rules between keys (a reject without reason, a quorum larger
// than the approvers, grantable or notify_arguments on a fulfil).
func checkDecisionObject(t *ast.Term, isDecision, strict bool, report func(code string, loc *ast.Location, msg string)) {
	seen := map[string]bool{}
	report = func(report func(string, *ast.Location, string)) func(string, *ast.Location, string) {
		return func(code string, loc *ast.Location, msg string) {
			// The whole-object check repeats what a key's check found.
			if !seen[msg] {
				seen[msg] = true
				report(code, loc, msg)
			}
		}
	}(report)
	obj := t.Value.(ast.Object)
	action := obj.Get(ast.InternedTerm("action"))
	if action == nil {
		if isDecision {
			report(ContractError, t.Location, `decision has no "action": every decision needs action fulfill, reject or escalate`)
		}
		return
	}
	// The other keys are checked beside escalate, which takes every key
	// and needs none; the rules between keys are checked below.
	escalate := ast.StringTerm(string(Escalate))
	for _, key := range obj.Keys() {
		name, ok := key.Value.(ast.String)
		if !ok {
			continue // a computed key; the sidecar checks it at run time
		}
		val := obj.Get(key)
		if !slices.Contains(decision.Fields, string(name)) {
			code := ContractWarning
			if strict {
				code = ContractError
			}
			report(code, key.Location, fmt.Sprintf("decision key %q is not part of the contract (%s); the sidecar keeps it only for the decision log", string(name), strings.Join(decision.Fields, ", ")))
			continue
		}
		if !isConstant(val) {
			continue
		}
		var probe ast.Object
		switch string(name) {
		case "action":
			probe = ast.NewObject(ast.Item(key, val), ast.Item(ast.InternedTerm("reason"), ast.InternedTerm(ReasonPolicy)))
		case "reason":
			// Checked against the list whatever the action: an invented
			// code on an escalate is the same typo waiting to happen.
			probe = ast.NewObject(ast.Item(ast.InternedTerm("action"), ast.StringTerm(string(Reject))), ast.Item(key, val))
		default:
			probe = ast.NewObject(ast.Item(ast.InternedTerm("action"), escalate), ast.Item(key, val))
		}
		if _, err := parseDecision(probe); err != nil {
			report(ContractError, val.Location, err.Error())
		}
	}
	// Rules between keys, on what is constant of them.
	if action.Value.Compare(ast.String(Reject)) == 0 && obj.Get(ast.InternedTerm("reason")) == nil {
		report(ContractError, t.Location, "malformed decision: reason: a reject needs a reason code")
	}
	if g := obj.Get(ast.InternedTerm("grantable")); g != nil {
		if s, ok := action.Value.(ast.String); ok && Action(s) != Escalate {
			report(ContractError, g.Location, malformed("grantable", "only an escalate decision may offer a grant, this one is %s", string(s)).Error())
		}
	}
	if n := obj.Get(ast.InternedTerm("notify_arguments")); n != nil && isConstant(n) && n.Value.Compare(ast.Boolean(true)) == 0 {
		if s, ok := action.Value.(ast.String); ok && Action(s) != Escalate {
			report(ContractError, n.Location, malformed("notify_arguments", "only an escalate decision notifies approvers, this one is %s", string(s)).Error())
		}
	}
	checkReachingObject(obj, action, report)
	q, a := obj.Get(ast.InternedTerm("quorum")), obj.Get(ast.InternedTerm("approvers"))
	if q != nil && a != nil && isConstant(q) && isConstant(a) {
		probe := ast.NewObject(ast.Item(ast.InternedTerm("action"), ast.StringTerm(string(Escalate))),
			ast.Item(ast.InternedTerm("quorum"), q), ast.Item(ast.InternedTerm("approvers"), a))
		if _, err := parseDecision(probe); err != nil {
			report(ContractError, q.Location, err.Error())
		}
	}
	if isConstant(t) {
		if _, err := parseDecision(obj); err != nil {
			report(ContractError, t.Location, err.Error())
		}
	}
}

// isConstant reports whether t is written as a constant: scalars, and
// arrays, sets and objects of constants. A ref (data.x, another rule) or a
// call is ground to OPA but known only when the policy runs.
func isConstant(t *ast.Term) bool {
	switch v := t.Value.(type) {
	case ast.Null, ast.Boolean, ast.Number, ast.String:
		return true
	case *ast.Array:
		return !v.Until(func(e *ast.Term) bool { return !isConstant(e) })
	case ast.Set:
		return !v.Until(func(e *ast.Term) bool { return !isConstant(e) })
	case ast.Object:
		return !v.Until(func(k, e *ast.Term) bool { return !isConstant(k) || !isConstant(e) })
	}
	return false
}

// checkReachingObject reports what parseDecision would refuse between
// reminders or escalate_to and the keys they depend on (the action, the
// timeout, the approvers), on what of them is constant.
func checkReachingObject(obj ast.Object, action *ast.Term, report func(code string, loc *ast.Location, msg string)) {
	for _, name := range []string{"reminders", "escalate_to"} {
		val := obj.Get(ast.InternedTerm(name))
		if val == nil || !isConstant(val) {
			continue
		}
		if s, ok := action.Value.(ast.String); ok && Action(s) != Escalate {
			what := "prompts to remind of"
			if name == "escalate_to" {
				what = "approvers to escalate to"
			}
			report(ContractError, val.Location, malformed(name, "only an escalate decision has %s, this one is %s", what, string(s)).Error())
			continue
		}
		probe := ast.NewObject(ast.Item(ast.InternedTerm("action"), ast.StringTerm(string(Escalate))), ast.Item(ast.InternedTerm(name), val))
		for _, other := range []string{"timeout", "approvers"} {
			if o := obj.Get(ast.InternedTerm(other)); o != nil && isConstant(o) {
				probe.Insert(ast.InternedTerm(other), o)
			}
		}
		if _, err := parseDecision(probe); err != nil {
			var me *MalformedDecisionError
			if errors.As(err, &me) && strings.HasPrefix(me.Field, name) {
				report(ContractError, val.Location, err.Error())
			}
		}
	}
}
