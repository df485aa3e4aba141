package policies

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"
)

// FuzzDecision feeds arbitrary JSON to decide, the function eval applies to
// whatever data.fulfiller.decision evaluated to. Properties: it never
// panics; the result is always one of the three actions and a reject always
// carries a valid reason code; a document an independent reading of the
// policy contract (wellFormed) calls malformed fails closed as reject
// "policy" with an error, and a well-formed one is taken as the policy's own
// decision; every decision marshals to valid JSON; a valid decision
// survives MarshalJSON and ParseDecision unchanged.
func FuzzDecision(f *testing.F) {
	for _, s := range []string{
		`{"action":"fulfill"}`,
		`{"action":"reject","reason":"policy","message":"no"}`,
		`{"action":"reject"}`,
		`{"action":"reject","reason":"nope"}`,
		`{"action":"escalate","approvers":["alice","bob"],"quorum":2,"timeout":"5m","editable":["path"]}`,
		`{"action":"escalate","approvers":["alice"],"quorum":2}`,
		`{"action":"escalate","approvers":["a","a"]}`,
		`{"action":"escalate","quorum":2.0,"timeout":"-1s"}`,
		`{"action":"escalate","quorum":1e400}`,
		`{"action":"escalate","quorum":3000000000}`,
		`{"action":"fulfill","target":"","x":{"revision":1}}`,
		`{"action":"fulfill","action":"reject","reason":"busy"}`,
		`{"action":"FULFILL"}`, `["fulfill"]`, `null`, `{}`, `"reject"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		v, err := jsonToValue(doc)
		if err != nil {
			// Not JSON: a policy cannot evaluate to this, and ParseDecision
			// must refuse it.
			if _, perr := ParseDecision(doc); perr == nil {
				t.Fatalf("ParseDecision accepted %q that jsonToValue refused", doc)
			}
			return
		}
		d := decide("rev", v)
		switch d.Action {
		case Fulfill, Escalate:
		case Reject:
			if d.Reason == "" || !ValidReason(d.Reason) {
				t.Fatalf("reject with reason %q", d.Reason)
			}
		default:
			t.Fatalf("action %q", d.Action)
		}
		if d.Revision != "rev" {
			t.Fatalf("revision %q", d.Revision)
		}
		// Whatever was decided, its JSON (eval output, decision log) is JSON.
		if out, err := json.Marshal(d); err != nil || !json.Valid(out) {
			t.Fatalf("decision JSON %q: %v", out, err)
		}
		ok, why := wellFormed(doc)
		if d.Err != nil {
			if d.Action != Reject || d.Reason != ReasonPolicy {
				t.Fatalf("failed decision is %s/%s, not reject/policy", d.Action, d.Reason)
			}
			if ok {
				t.Fatalf("well-formed decision %s failed closed: %v", doc, d.Err)
			}
			return
		}
		if !ok {
			t.Fatalf("malformed decision %s (%s) taken as %+v", doc, why, d)
		}
		if d.Action == Escalate && (d.Quorum < 1 || (len(d.Approvers) > 0 && d.Quorum > len(d.Approvers))) {
			t.Fatalf("escalation with quorum %d of %d approvers", d.Quorum, len(d.Approvers))
		}

		out, err := d.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		back, err := ParseDecision(out)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", out, err)
		}
		if back.Action != d.Action || back.Reason != d.Reason || back.Message != d.Message ||
			back.Target != d.Target || back.Quorum != d.Quorum || back.Timeout != d.Timeout ||
			!sameList(back.Approvers, d.Approvers) || !sameList(back.Editable, d.Editable) {
			t.Fatalf("round trip changed the decision:\n%+v\n%+v\n%s", d, back, out)
		}
	})
}

// sameList treats nil and empty alike only when both are; MarshalJSON
// keeps [] and drops nil, so the distinction survives.
func sameList(a, b []string) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// wellFormed is the policy contract read independently of parseDecision,
// with encoding/json: the oracle FuzzDecision checks the parser against.
func wellFormed(doc []byte) (bool, string) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return false, "not an object"
	}
	str := func(k string) (string, bool, bool) { // value, present, ok
		x, present := m[k]
		if !present {
			return "", false, true
		}
		s, isStr := x.(string)
		return s, true, isStr
	}
	list := func(k string) ([]string, bool, bool) {
		x, present := m[k]
		if !present {
			return nil, false, true
		}
		xs, isList := x.([]any)
		if !isList {
			return nil, true, false
		}
		out := []string{}
		for _, e := range xs {
			s, isStr := e.(string)
			if !isStr || s == "" {
				return nil, true, false
			}
			out = append(out, s)
		}
		return out, true, true
	}
	action, present, isStr := str("action")
	if !present || !isStr {
		return false, "action"
	}
	if action != "fulfill" && action != "reject" && action != "escalate" {
		return false, "action value"
	}
	reason, _, isStr := str("reason")
	if !isStr {
		return false, "reason"
	}
	if action == "reject" && !ValidReason(reason) {
		return false, "reject reason"
	}
	if _, _, isStr := str("message"); !isStr {
		return false, "message"
	}
	if target, present, isStr := str("target"); !isStr || (present && target == "") {
		return false, "target"
	}
	approvers, _, isList := list("approvers")
	if !isList {
		return false, "approvers"
	}
	seen := map[string]bool{}
	for _, a := range approvers {
		if seen[a] {
			return false, "approvers twice"
		}
		seen[a] = true
	}
	if _, _, isList := list("editable"); !isList {
		return false, "editable"
	}
	quorum := 1
	if x, present := m["quorum"]; present {
		n, isNum := x.(json.Number)
		if !isNum {
			return false, "quorum type"
		}
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			quorum = int(i)
		} else {
			f, err := strconv.ParseFloat(string(n), 64)
			if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
				return false, "quorum not whole"
			}
			quorum = int(f)
		}
		if quorum < 1 {
			return false, "quorum < 1"
		}
	}
	if s, present, isStr := str("timeout"); !isStr {
		return false, "timeout type"
	} else if present {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return false, "timeout value"
		}
	}
	if action == "escalate" && len(approvers) > 0 && quorum > len(approvers) {
		return false, "quorum over approvers"
	}
	return true, ""
}
