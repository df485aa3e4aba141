package suggest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decisionlog/logrecord"
	"github.com/mewkit/fulfiller/policies/replay"
)

// Wiring is the one line that makes a main policy (examples/policies'
// structure: deny beats escalate beats fulfil) consult every suggestion
// loaded beside it, as the last branch of its decision chain.
const Wiring = `} else := {"action": "fulfill", "message": "suggested rule"} if data.fulfiller.suggested[_].fulfill`

// lit writes v as a Rego literal. Everything a proposer chose reaches
// the generated Rego only through here: JSON is Rego's term syntax, and
// JSON escaping (unlike Go's %q, whose \x escapes Rego rejects) keeps a
// string a string, whatever quotes, backslashes, newlines or braces it
// holds.
func lit(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("suggest: literal of %T: %v", v, err)) // only JSON-decoded values and strings reach here
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// litJSON writes a JSON value as a Rego literal, through lit: canonical
// JSON leaves U+2028 and other characters raw, which lit escapes.
func litJSON(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic(fmt.Sprintf("suggest: literal of %s: %v", raw, err)) // the value was read from JSON
	}
	return lit(v)
}

// quote shows a proposer's string in a comment: Go quoting escapes every
// newline and control character, so a value cannot end the comment line
// and become code.
func quote(s string) string { return strconv.Quote(s) }

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}

// render writes s's rule and test files.
func render(rego Rego, s *Suggestion, p pattern, g *group, source string) error {
	rule, err := formatted(rego, s.RuleFile, ruleSource(rego, s, source))
	if err != nil {
		return err
	}
	tests, err := testSource(s, p, g)
	if err != nil {
		return err
	}
	test, err := formatted(rego, s.TestFile, tests)
	if err != nil {
		return err
	}
	s.Rule, s.Test = rule, test
	return nil
}

// formatted parses src as Rego v1 and formats it as opa fmt does, so the
// files pass opa fmt unchanged; a parse error here is a bug.
func formatted(rego Rego, name, src string) ([]byte, error) {
	b, err := rego.Format(name, []byte(src))
	if err != nil {
		return nil, fmt.Errorf("generated %s does not format: %w", name, err)
	}
	return b, nil
}

func ruleSource(rego Rego, s *Suggestion, source string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# Suggested by `fulfiller suggest` from the decision log %s.", quote(source))
	w("# Review it before committing: nothing is applied until a policy author")
	w("# adds this file to the policy, whose main rule consults it with the line")
	w("#   %s", Wiring)
	w("# (see docs/suggest.md).")
	w("#")
	server := "an unknown server (the log did not say; the rule requires that)"
	if s.Server != "" {
		server = quote(s.Server)
	}
	w("# Evidence: %d human approvals of %s calling %s on %s,", s.Approvals, quote(s.Proposer), quote(s.Tool), server)
	w("# by %s, from %s to %s.", quoteAll(s.Approvers), s.First.UTC().Format(time.RFC3339), s.Last.UTC().Format(time.RFC3339))
	more := ""
	if n := s.Approvals - len(s.ProposalIDs); n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	w("# Approved proposals: %s%s.", quoteAll(s.ProposalIDs), more)
	w("# Declined calls of this proposer, tool and server: %d, none covered by this rule.", s.Declines)
	w("#")
	w("# Pattern (a call outside it is not fulfilled by this rule):")
	for _, a := range s.Args {
		w("#   arguments[%s]: %s", quote(a.Name), describe(a, s.Approvals))
	}
	w("#   any other argument: not allowed")
	w("package %s", s.Package)
	w("")
	w("fulfill if {")
	w("\tinput.method == \"tools/call\"")
	w("\tinput.proposer.id == %s", lit(s.Proposer))
	w("\tinput.params.name == %s", lit(s.Tool))
	if s.Server != "" {
		w("\tinput.tool.server == %s", lit(s.Server))
	} else {
		w("\tnot input.tool.server")
	}
	w("\targs := object.get(input.params, \"arguments\", {})")
	if len(s.Args) == 0 {
		w("\targs == {}")
	} else {
		names := make([]string, len(s.Args))
		for i, a := range s.Args {
			names[i] = lit(a.Name)
		}
		w("\tobject.keys(args) - {%s} == set()", strings.Join(names, ", "))
	}
	prefixes := false
	for i, a := range s.Args {
		name := lit(a.Name)
		switch a.Kind {
		case Pinned:
			if a.Optional {
				w("\tobject.get(args, %s, %s) == %s", name, litJSON(a.Value), litJSON(a.Value))
			} else {
				w("\t%s == %s", argRef(rego, w, i, a.Name), litJSON(a.Value))
			}
		case Prefix:
			prefixes = true
			if a.Optional {
				w("\tunder(object.get(args, %s, %s), %s)", name, lit(a.Prefix), lit(a.Prefix))
			} else {
				w("\tunder(%s, %s)", argRef(rego, w, i, a.Name), lit(a.Prefix))
			}
		}
	}
	w("}")
	if prefixes {
		w("")
		w("# A path under prefix, which . or .. segments could climb out of.")
		w("under(path, prefix) if {")
		w("\tis_string(path)")
		w("\tstartswith(path, prefix)")
		w("\tnot climbs(path)")
		w("}")
		w("")
		w("climbs(path) if {")
		w("\tsome segment in split(path, \"/\")")
		w("\tsegment in {\".\", \"..\"}")
		w("}")
	}
	return b.String()
}

// argRef is how the rule names argument name: args.name when name is an
// identifier, and otherwise through a variable bound to its literal first.
// opa fmt rewrites a ref's string key with Go quoting, which Rego cannot
// read back for control characters; a variable's value it leaves as
// written.
func argRef(rego Rego, w func(string, ...any), i int, name string) string {
	if rego.RefKey(name) && name != "input" && name != "data" {
		return "args." + name
	}
	v := fmt.Sprintf("arg_%d", i+1)
	w("\t%s := %s", v, lit(name))
	return "args[" + v + "]"
}

// describe says in words what the rule allows of an argument.
func describe(a Arg, approvals int) string {
	var d string
	switch a.Kind {
	case Pinned:
		d = "pinned to " + litJSON(a.Value)
	case Prefix:
		d = fmt.Sprintf("under %s (%d distinct values approved)", quote(a.Prefix), a.Distinct)
	default:
		d = fmt.Sprintf("FREE, any value: it varied (%d distinct values approved)", a.Distinct)
	}
	if len(d) > 200 {
		d = d[:200] + "…"
	}
	if a.Optional {
		d += fmt.Sprintf("; may be absent (present in %d of %d approvals)", a.Present, approvals)
	}
	return quoteComment(d)
}

// quoteComment keeps a comment on its line: a pinned value is JSON, which
// cannot hold a raw newline, but be sure.
func quoteComment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == 0x2028 || r == 0x2029 || r == 0x85 {
			return '?'
		}
		return r
	}, s)
}

// testCase is one generated test.
type testCase struct {
	comment string
	input   map[string]any
	fulfil  bool
}

func testSource(s *Suggestion, p pattern, g *group) (string, error) {
	var cases []testCase
	for _, c := range g.cases {
		in, err := decodeInput(c)
		if err != nil {
			return "", err
		}
		cases = append(cases, testCase{
			comment: fmt.Sprintf("approved: proposal %s by %s at %s", quote(c.id), quoteAll(c.by), c.time.UTC().Format(time.RFC3339)),
			input:   in, fulfil: true,
		})
	}
	for i, c := range g.declines {
		if i == DefaultMaxCases {
			break
		}
		in, err := decodeInput(c)
		if err != nil {
			return "", err
		}
		cases = append(cases, testCase{
			comment: fmt.Sprintf("declined by a human: proposal %s at %s", quote(c.id), c.time.UTC().Format(time.RFC3339)),
			input:   in,
		})
	}
	outside, err := outsideCases(s, g.cases[0])
	if err != nil {
		return "", err
	}
	cases = append(cases, outside...)

	var b strings.Builder
	fmt.Fprintf(&b, "# Tests of %s, built from the recorded calls\n", s.Package)
	fmt.Fprintf(&b, "# (the input's method, params, proposer and tool, as the policy saw them).\n")
	fmt.Fprintf(&b, "package %s_test\n\nimport data.%s\n", s.Package, s.Package)
	n := map[bool]int{}
	for _, tc := range cases {
		// The Go pattern and the Rego rule must agree on every case:
		// a disagreement is a bug in this package, not a finding.
		c, err := readCall(&replay.Record{Record: recordOf(tc.input)})
		if err != nil {
			return "", fmt.Errorf("test case %s: %w", tc.comment, err)
		}
		if p.covers(c) != tc.fulfil {
			return "", fmt.Errorf("test case %s: the pattern disagrees", tc.comment)
		}
		kind := "not_fulfilled"
		expr := "not " + s.Name + ".fulfill"
		if tc.fulfil {
			kind, expr = "fulfilled", s.Name+".fulfill"
		}
		n[tc.fulfil]++
		fmt.Fprintf(&b, "\n# %s\ntest_%s_%d if {\n\t%s with input as %s\n}\n", quoteComment(tc.comment), kind, n[tc.fulfil], expr, lit(tc.input))
	}
	return b.String(), nil
}

// decodeInput is a recorded call's input as a value to edit; numbers stay
// as they were written.
func decodeInput(c *call) (map[string]any, error) {
	b, err := json.Marshal(c.input)
	if err != nil {
		return nil, fmt.Errorf("proposal %s: %w", quote(c.id), err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var in map[string]any
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("proposal %s: %w", quote(c.id), err)
	}
	return in, nil
}

// recordOf is a decision record holding in, to read it as Learn does.
func recordOf(in map[string]any) logrecord.Record {
	b, _ := json.Marshal(in)
	return logrecord.Record{ProposalID: "test", Input: b}
}

// outsideCases are calls just outside the pattern, made from an approved
// one: another proposer, tool or server, an argument no approval had, and
// for each pinned or prefixed argument a value beside it.
func outsideCases(s *Suggestion, base *call) ([]testCase, error) {
	var out []testCase
	add := func(what string, edit func(in map[string]any)) error {
		in, err := decodeInput(base)
		if err != nil {
			return err
		}
		edit(in)
		out = append(out, testCase{comment: "outside the pattern: " + what, input: in})
		return nil
	}
	errs := []error{
		add("another proposer", func(in map[string]any) { in["proposer"] = map[string]any{"id": s.Proposer + "_other"} }),
		add("another tool", func(in map[string]any) {
			obj(in, "params")["name"] = s.Tool + "_other"
			obj(in, "tool")["name"] = s.Tool + "_other"
		}),
		add("another server", func(in map[string]any) { obj(in, "tool")["server"] = s.Server + "_other" }),
	}
	extra := "unexpected"
	for slicesHasArg(s.Args, extra) {
		extra += "_"
	}
	errs = append(errs, add("an argument no approval had", func(in map[string]any) { setArg(in, extra, "x") }))
	for _, a := range s.Args {
		switch a.Kind {
		case Pinned:
			var v any = "other"
			var str string
			if json.Unmarshal(a.Value, &str) == nil {
				v = str + "_other"
			}
			errs = append(errs, add(fmt.Sprintf("arguments[%s] not %s", quote(a.Name), string(a.Value)), func(in map[string]any) { setArg(in, a.Name, v) }))
		case Prefix:
			sibling := strings.TrimSuffix(a.Prefix, "/") + "_outside/file"
			climb := a.Prefix + "../outside"
			errs = append(errs,
				add(fmt.Sprintf("arguments[%s] beside %s", quote(a.Name), quote(a.Prefix)), func(in map[string]any) { setArg(in, a.Name, sibling) }),
				add(fmt.Sprintf("arguments[%s] climbing out of %s", quote(a.Name), quote(a.Prefix)), func(in map[string]any) { setArg(in, a.Name, climb) }),
				add(fmt.Sprintf("arguments[%s] not a string", quote(a.Name)), func(in map[string]any) { setArg(in, a.Name, 1) }))
		default:
			continue
		}
		if !a.Optional {
			errs = append(errs, add(fmt.Sprintf("arguments[%s] missing", quote(a.Name)), func(in map[string]any) { deleteArg(in, a.Name) }))
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func slicesHasArg(args []Arg, name string) bool {
	for _, a := range args {
		if a.Name == name {
			return true
		}
	}
	return false
}

// obj is in[key] as an object, made when missing.
func obj(in map[string]any, key string) map[string]any {
	if m, ok := in[key].(map[string]any); ok {
		return m
	}
	m := map[string]any{}
	in[key] = m
	return m
}

// setArg sets an argument where the input holds the arguments: params
// and the tool.
func setArg(in map[string]any, name string, v any) {
	obj(obj(in, "params"), "arguments")[name] = v
	if t, ok := in["tool"].(map[string]any); ok {
		if args, ok := t["arguments"].(map[string]any); ok {
			args[name] = v
		}
	}
}

func deleteArg(in map[string]any, name string) {
	if p, ok := in["params"].(map[string]any); ok {
		if args, ok := p["arguments"].(map[string]any); ok {
			delete(args, name)
		}
	}
	if t, ok := in["tool"].(map[string]any); ok {
		if args, ok := t["arguments"].(map[string]any); ok {
			delete(args, name)
		}
	}
}
