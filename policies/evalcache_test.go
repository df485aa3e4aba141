package policies

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// TestRuleCacheBehavesAsOPAs drives ruleCache and OPA's own virtual cache
// with the same random operations and checks that every Get and Keys
// answers alike: the engine swaps one for the other, so any difference
// could change a decision.
func TestRuleCacheBehavesAsOPAs(t *testing.T) {
	refs := []ast.Ref{
		ast.MustParseRef("data.fulfiller.decision"),
		ast.MustParseRef("data.fulfiller.quotas.deny"),
		ast.MustParseRef("data.fulfiller.quotas"),
		ast.MustParseRef(`data.fulfiller.tools.read_only`),
		ast.MustParseRef(`data.fulfiller.f[1]`),
		ast.MustParseRef(`data.fulfiller.f["1"]`),
		ast.MustParseRef(`data.fulfiller.g[{"a": [1, 2]}]`),
		ast.MustParseRef(`data.fulfiller.g[{"a": [1, 3]}]`),
		{ast.VarTerm("data")},
		{},
	}
	values := []*ast.Term{nil, ast.BooleanTerm(true), ast.StringTerm("x"), ast.MustParseTerm(`{"action": "fulfill"}`)}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		ours, theirs := getRuleCache(), topdown.NewVirtualCache()
		depth := 1
		for step := range 200 {
			where := fmt.Sprintf("round %d step %d", round, step)
			switch op := rng.IntN(10); {
			case op == 0 && depth < 4:
				ours.Push()
				theirs.Push()
				depth++
			case op == 1 && depth > 1:
				ours.Pop()
				theirs.Pop()
				depth--
			case op < 5:
				// A ref whose backing array the caller reuses, as topdown's
				// e.plugged is: the cache must have copied it.
				ref := slices.Clone(refs[rng.IntN(len(refs))])
				v := values[rng.IntN(len(values))]
				ours.Put(ref, v)
				theirs.Put(slices.Clone(ref), v)
				for i := range ref {
					ref[i] = ast.StringTerm("overwritten")
				}
			default:
				ref := refs[rng.IntN(len(refs))]
				gv, gu := ours.Get(ref)
				wv, wu := theirs.Get(ref)
				if gu != wu || !termsEqual(gv, wv) {
					t.Fatalf("%s: Get(%v) = %v, %v; OPA's cache says %v, %v", where, ref, gv, gu, wv, wu)
				}
			}
			if got, want := refStrings(ours.Keys()), refStrings(theirs.Keys()); !slices.Equal(got, want) {
				t.Fatalf("%s: Keys = %v, OPA's cache says %v", where, got, want)
			}
		}
		ours.release()
	}
}

func termsEqual(a, b *ast.Term) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

func refStrings(refs []ast.Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	slices.Sort(out)
	return out
}

// TestRuleCacheComesBackEmpty: a cache taken from the pool after an
// evaluation that filled it, and pushed frames it never popped, has one
// empty frame.
func TestRuleCacheComesBackEmpty(t *testing.T) {
	c := getRuleCache()
	ref := ast.MustParseRef("data.fulfiller.decision")
	c.Put(ref, ast.BooleanTerm(true))
	c.Push()
	c.Put(ref, nil)
	c.release()
	for range 10 { // the pool may hand out another cache; each must be empty
		c = getRuleCache()
		if v, undefined := c.Get(ref); v != nil || undefined || len(c.Keys()) != 0 || len(c.frames) != 1 {
			t.Fatalf("reused cache: Get = %v, %v; Keys = %v; %d frames", v, undefined, c.Keys(), len(c.frames))
		}
		defer c.release()
	}
}

// TestDataCache: what was put is found, whole or in part; a later put of
// a path above replaces what was below it; nothing is found that was not
// put; past its bound the cache stops growing and still answers.
func TestDataCache(t *testing.T) {
	c := newDataCache()
	settings := ast.MustParseTerm(`{"blocklist": ["mallory"], "quotas": {"max_pending": 50}}`).Value
	c.Put(ast.MustParseRef("data.settings"), settings)
	for ref, want := range map[string]string{
		"data.settings":                    settings.String(),
		"data.settings.quotas.max_pending": "50",
		"data.settings.blocklist[0]":       `"mallory"`,
	} {
		got := c.Get(ast.MustParseRef(ref))
		if got == nil || got.String() != want {
			t.Errorf("Get(%s) = %v, want %s", ref, got, want)
		}
	}
	for _, ref := range []string{"data", "data.other", "data.settings.nothing", "data.settings.blocklist[1]"} {
		if got := c.Get(ast.MustParseRef(ref)); got != nil {
			t.Errorf("Get(%s) = %v, want nothing", ref, got)
		}
	}
	c.Put(ast.MustParseRef("data.x.y"), ast.String("deep"))
	if got := c.Get(ast.MustParseRef("data.x.y")); got == nil || got.String() != `"deep"` {
		t.Errorf("Get(data.x.y) = %v", got)
	}
	c.Put(ast.MustParseRef("data.x"), ast.MustParseTerm(`{"z": 1}`).Value)
	if got := c.Get(ast.MustParseRef("data.x.y")); got != nil {
		t.Errorf("data.x.y after data.x was put = %v, want nothing (data.x holds no y)", got)
	}

	full := newDataCache()
	// The ref MustParseRef("data.users.uN") gives, built directly: the
	// parser costs more than the cache and runs 16 k times here.
	users := ast.MustParseRef("data.users")
	if u0 := append(users.Copy(), ast.StringTerm("u0")); !u0.Equal(ast.MustParseRef("data.users.u0")) {
		t.Fatalf("built ref %v is not the parsed one", u0)
	}
	for i := 0; full.nodes < maxDataCacheNodes; i++ {
		full.Put(append(users.Copy(), ast.StringTerm(fmt.Sprintf("u%d", i))), ast.String("v"))
	}
	before := full.nodes
	full.Put(ast.MustParseRef("data.users.more.and.more"), ast.String("v"))
	if full.nodes != before {
		t.Errorf("cache grew past its bound: %d nodes, was %d", full.nodes, before)
	}
	if got := full.Get(ast.MustParseRef("data.users.u0")); got == nil || got.String() != `"v"` {
		t.Errorf("full cache lost data.users.u0: %v", got)
	}
}

// TestSharedCachesDecideAsOPA decides many inputs, one after another and
// concurrently, with the engine (its data cache shared by every
// evaluation of the set, its rule caches reused) and with the same
// prepared query under OPA's defaults (fresh caches each time), and
// requires the same decision every time. The policy reads data at fixed
// paths and at paths made from the input, overrides data and input with
// `with`, and memoises functions, so that a cache that leaked one
// evaluation's values into the next would show.
func TestSharedCachesDecideAsOPA(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"policy.rego": `package fulfiller

import rego.v1

level(id) := data.users[id].level

default limit := 0

limit := data.limits[input.tool.name] if input.tool.name

allowed if {
	level(input.proposer.id) >= limit
	not input.proposer.id in data.blocklist
}

shadowed if allowed with data.blocklist as []

second if allowed with input.proposer.id as "bob"

default decision := {"action": "reject", "reason": "policy", "message": "nobody"}

decision := {"action": "fulfill", "message": sprintf("%v/%v", [limit, second])} if allowed

else := {"action": "escalate", "message": sprintf("%v", [shadowed]), "approvers": [n | n := data.users[_].name]} if input.agent.pending < 5

else := {"action": "reject", "reason": "policy", "message": sprintf("%v", [level(input.proposer.id)])}
`,
		"data.json": `{"users": {"alice": {"level": 3, "name": "Alice"}, "bob": {"level": 1, "name": "Bob"}, "mallory": {"level": 9, "name": "M"}},
"limits": {"read_file": 1, "write_file": 2, "drop_db": 5}, "blocklist": ["mallory"]}`,
	})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{dir + "/policy.rego"}, Data: []string{dir + "/data.json"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var inputs []*Input
	for _, who := range []string{"alice", "bob", "mallory", "nobody"} {
		for _, tool := range []string{"read_file", "write_file", "drop_db", "unknown"} {
			for _, pending := range []int{0, 10} {
				inputs = append(inputs, &Input{
					Method:   "tools/call",
					Tool:     &Tool{Name: tool, Server: "fs"},
					Proposer: &Participant{ID: who},
					Agent:    AgentInfo{ID: "fulfiller", Pending: pending, MaxPending: 100},
				})
			}
		}
	}
	set := e.cur.Load()
	want := make([]Decision, len(inputs))
	actions := map[Action]bool{}
	for i, in := range inputs {
		v, err := in.Value()
		if err != nil {
			t.Fatal(err)
		}
		rs, err := set.query.Eval(t.Context(), rego.EvalParsedInput(v))
		if err != nil || len(rs) != 1 {
			t.Fatalf("input %d under OPA's defaults: %v, %d results", i, err, len(rs))
		}
		want[i] = decide(set.revision, rs[0].Expressions[0].Value.(*ast.Term).Value)
		if want[i].Err != nil {
			t.Fatalf("input %d under OPA's defaults: %v", i, want[i].Err)
		}
		actions[want[i].Action] = true
	}
	if len(actions) != 3 {
		t.Fatalf("the inputs reach %v; the test needs all three actions", actions)
	}
	check := func(i int) error {
		got := e.Decide(t.Context(), inputs[i])
		if got.Action != want[i].Action || got.Reason != want[i].Reason || got.Message != want[i].Message ||
			!slices.Equal(got.Approvers, want[i].Approvers) || got.Err != nil {
			return fmt.Errorf("input %d: engine decided %+v, OPA's defaults %+v", i, got, want[i])
		}
		return nil
	}
	for range 3 {
		for i := range inputs {
			if err := check(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for n := range 200 {
				if err := check((w*7 + n*5) % len(inputs)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
