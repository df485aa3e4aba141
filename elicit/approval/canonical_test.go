package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"reflect"
	"strconv"
	"testing"
)

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// RFC 8785 section 3.2.2 example, but for its first number,
		// 333333333.33333329: it is more precise than a double (refused
		// below), and this is the text of its double.
		{`{"numbers":[333333333.3333333,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		// RFC 8785 section 3.2.3: sorting by UTF-16 code units.
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		// Go's json.Marshal would escape these; JCS does not.
		{`{"a":"<b>&amp;</b>"}`, `{"a":"<b>&amp;</b>"}`},
		{`{"a":"\u003c\u003e\u0026"}`, `{"a":"<>&"}`},
		{` [ 1.0 , -0 , 1e21 , 1e-7 , 100 ] `, `[1,0,1e+21,1e-7,100]`},
	} {
		got, err := Canonical([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s)\n got %s %v\nwant %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`[333333333.33333329]`, `{"a":1,"a":2}`, `{"a":01}`, `1_0`, `{"a":"\ud800"}`, `{"\ud800x":1}`, `[1e400]`, "\"\xff\"", `{`, ``} {
		if got, err := Canonical([]byte(bad)); !errors.Is(err, ErrNotCanonicalizable) {
			t.Errorf("Canonical(%q) = %s, %v; want an error", bad, got, err)
		}
	}
}

// FuzzCanonical checks properties that any correct RFC 8785 implementation
// has: the output is valid JSON meaning the same as the input, canonicalizing
// again changes nothing, and no HTML escapes appear.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `"<>&"`, `[1.5e300,-0.0,123456789012345678901234567890]`, `{"\u00e9":"\ud83d\ude00","e":"\u00e9"}`, `{"a":{"b":{"c":[]}}}`, `0.1`, `"\u2028\u0001"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonical(in)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid output %q for %q", out, in)
		}
		again, err := Canonical(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q (%v)", out, again, err)
		}
		if bytes.Contains(out, []byte(`\u003c`)) || bytes.Contains(out, []byte(`\u0026`)) {
			t.Fatalf("HTML escape in %q", out)
		}
		if !sameJSON(t, in, out) {
			t.Fatalf("meaning changed: %q -> %q", in, out)
		}
	})
}

// sameJSON compares two documents as values, numbers as float64.
func sameJSON(t *testing.T, a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		t.Fatalf("undecodable: %q %q", a, b)
	}
	return reflect.DeepEqual(normalize(x), normalize(y))
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
	case float64:
		if x == 0 {
			return 0.0 // -0 is written as 0
		}
		if math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
	}
	return v
}

func TestCallDigestWithoutParams(t *testing.T) {
	// "params": null when the proposal has none: sha256 of
	// {"method":"tools/list","params":null}.
	d, err := CallDigest("tools/list", nil)
	if err != nil || d != "0085df17a487b81ca08f6e4e33e9f8f387ae2163dd4492b5b8db8334a5edb23f" {
		t.Errorf("digest %s %v", d, err)
	}
}

// TestCanonicalRefusesUnpairedSurrogates pins the FuzzCanonical finding: a
// high surrogate escape followed by any other \u escape was paired with it
// anyway, so different documents shared one canonical form.
func TestCanonicalRefusesUnpairedSurrogates(t *testing.T) {
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{`"\ud800\u0000"`, false},
		{`{"path":"a\ud800\u002fetc"}`, false},
		{`{"path":"a\ud800\u0041etc"}`, false},
		{`"\udc00\ud800"`, false},
		{`"\ud800"`, false},
		{`"x\ud800y"`, false},
		{`"\ud800\udc00"`, true},
		{`"\uD83D\uDE00 \u00e9"`, true},
		{`"\\ud800"`, true}, // an escaped backslash, then text
		{`{"\\\\":"\\u0000","k":"\"\ud83d\ude00"}`, true},
	} {
		_, err := Canonical([]byte(tc.doc))
		if (err == nil) != tc.ok {
			t.Errorf("Canonical(%s): err %v, want ok=%v", tc.doc, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrNotCanonicalizable) {
			t.Errorf("Canonical(%s): %v does not wrap ErrNotCanonicalizable", tc.doc, err)
		}
	}
}

// TestCanonicalRefusesNumbersBeyondDoubles pins the round-4 finding: the
// JCS step writes each number as its nearest double, so integers beyond
// 2^53 that differ shared one canonical form and one call digest, while a
// tool reading integers exactly (Python's json, Jackson) runs different
// calls. A number is now kept only when its value is that of its
// double's shortest text, the one RFC 8785 writes.
func TestCanonicalRefusesNumbersBeyondDoubles(t *testing.T) {
	for _, bad := range []string{
		`{"id":9007199254740993}`, // 2^53+1
		`{"id":9007199254740992.5}`,
		`{"id":-9007199254740993}`,
		`{"id":18446744073709551617}`,
		`[123456789012345678901234567890]`,
		// 2^64 is a double, but RFC 8785 writes it 18446744073709552000
		// (its shortest text), as it writes 18446744073709552000 itself.
		`[18446744073709551616]`,
		`[0.10000000000000001]`, // the double of 0.1, but not its text
		`[1e-400]`,              // below the smallest double: it would be 0
		`[4.9e-325]`,
		`[1.2345678901234567e-320]`, // a subnormal has fewer digits
		`[1e-99999999999]`,
		`[1e400]`,
		`[1.8e308]`,
		`{"a":{"b":["x",{"c":9007199254740993}]}}`,
		`{"s":"\"","n":9007199254740993}`,
	} {
		got, err := Canonical([]byte(bad))
		if !errors.Is(err, ErrNotCanonicalizable) {
			t.Errorf("Canonical(%s) = %s, %v; want ErrNotCanonicalizable", bad, got, err)
		}
	}
	a, errA := CallDigest("tools/call", json.RawMessage(`{"name":"delete","arguments":{"id":9007199254740993}}`))
	b, errB := CallDigest("tools/call", json.RawMessage(`{"name":"delete","arguments":{"id":9007199254740992}}`))
	if errA == nil || errB != nil || a == b {
		t.Errorf("digests of ids 2^53+1 and 2^53: %q %v, %q %v; want an error for the first only", a, errA, b, errB)
	}
	for _, tc := range []struct{ in, want string }{
		{`[9007199254740992]`, `[9007199254740992]`}, // 2^53
		{`[9007199254740994]`, `[9007199254740994]`}, // a double
		{`[-9007199254740992]`, `[-9007199254740992]`},
		{`[18446744073709552000]`, `[18446744073709552000]`},
		{`[1e21, 1E21, 10e20, 1000000000000000000000]`, `[1e+21,1e+21,1e+21,1e+21]`},
		{`[0.1, 1e-1, 0.10, -0, -0.0, 0e999999999999, 1.5e300]`, `[0.1,0.1,0.1,0,0,0,1.5e+300]`},
		{`[5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]`, `[5e-324,2.2250738585072014e-308,1.7976931348623157e+308]`},
		{`{"a":"9007199254740993","b":"1e400"}`, `{"a":"9007199254740993","b":"1e400"}`}, // strings are not numbers
		{`[123456789012345, -123456789012345, 0.000001]`, `[123456789012345,-123456789012345,0.000001]`},
	} {
		got, err := Canonical([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s)\n got %s %v\nwant %s", tc.in, got, err, tc.want)
		}
	}
}
