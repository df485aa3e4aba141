package space

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSplitObject(t *testing.T) {
	in := `{"a":"}\"{,","b\u0063":{"x":[1,{"y":"]"}]},"n":-1.5e3,"t":true,"z":null,"a":2}`
	fs, ok := splitObject([]byte(in), nil)
	if !ok {
		t.Fatal("not an object")
	}
	var got []string
	for _, f := range fs {
		got = append(got, string(f.key)+"="+string(f.val))
	}
	// A repeated key keeps its first place and takes the last value.
	want := []string{`a=2`, `bc={"x":[1,{"y":"]"}]}`, `n=-1.5e3`, `t=true`, `z=null`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	for _, notObject := range []string{`[]`, `null`, `"x"`, `1`} {
		if _, ok := splitObject([]byte(notObject), nil); ok {
			t.Errorf("%s split as an object", notObject)
		}
	}
	if fs, ok := splitObject([]byte(`{}`), nil); !ok || len(fs) != 0 {
		t.Errorf("{} gave %v %v", fs, ok)
	}
}

func TestTruthy(t *testing.T) {
	for v, want := range map[string]bool{
		``: false, `null`: false, `false`: false, `""`: false, `0`: false, `-0`: false, `0.0`: false, `0e5`: false,
		`true`: true, `"0"`: true, `" "`: true, `1`: true, `-0.1`: true, `{}`: true, `[]`: true,
	} {
		if got := truthy([]byte(v)); got != want {
			t.Errorf("truthy(%s) = %v", v, got)
		}
	}
}

func TestNormaliseKeepsSenderOrder(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 11, 40, 551e6, time.UTC)
	fs, _ := splitObject([]byte(`{"kind":"chat","ts":"t0","correlation_id":"c","payload":{"text":"x"}}`), nil)
	got := normalise(fs, `we"ird`, now)
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(`{"protocol":"mew/v0.4","id":"msg-1795342300551-`) + `[a-z0-9]{9}` +
		regexp.QuoteMeta(`","ts":"t0","from":"we\"ird","kind":"chat","correlation_id":["c"],"payload":{"text":"x"}}`) + `$`)
	if !want.Match(got) {
		t.Fatalf("got %s", got)
	}
	if !json.Valid(got) {
		t.Fatalf("invalid JSON %s", got)
	}
}

func TestAppendStringMatchesJSON(t *testing.T) {
	for _, s := range []string{"plain", `q"b\s`, "ctl\x01\n\t\r", "ünï <&>"} {
		var back string
		if err := json.Unmarshal(appendString(nil, s), &back); err != nil || back != s {
			t.Errorf("%q round-tripped to %q (%v)", s, back, err)
		}
	}
	if got := string(appendString(nil, "<&>")); got != `"<&>"` {
		t.Errorf("HTML escaped: %s", got)
	}
}

func TestCapSetDedupesWholeObjects(t *testing.T) {
	cs, err := newCapSet(labTokens()["calculator-token"])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(cs.json), `[{"kind":"mcp/response"},{"kind":"chat"},{"id":"mcp-response","kind":"mcp/response"}]`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	cs, _ = newCapSet(append(labTokens()["observer-token"], baseline, baseline))
	if got, want := string(cs.json), observerCaps; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func BenchmarkNormalise(b *testing.B) {
	frame := []byte(`{"protocol":"mew/v0.4","id":"p-1","ts":"2026-11-22T10:11:33.000Z","from":"proposer","to":["calculator"],"kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}}`)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		c, _ := compactFrame(frame)
		var buf [16]field
		fs, _ := splitObject(c, buf[:0])
		_ = normalise(fs, "proposer", now)
	}
}
