package policies

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestLoadErrorPretty: a policy author sees every error of a load, each
// with file:line:column, the offending line and a caret under the spot, as
// opa check prints them; Error stays one line for logs.
func TestLoadErrorPretty(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"parse/a.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\"} if {\n\tinput.method ==\n}\n",
		"parse/b.rego": "package fulfiller\n\nallow if {\n\t\tinput.x = = 1\n}\n",
		"compile/p.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\", \"message\": msg} if {\n" +
			"\tinput.method == \"tools/call\"\n}\n\nrisk := level if input.tool.name == \"x\"\n",
	})
	a, b, p := filepath.Join(dir, "parse", "a.rego"), filepath.Join(dir, "parse", "b.rego"), filepath.Join(dir, "compile", "p.rego")
	tests := []struct {
		name   string
		policy string
		error  string
		pretty string
	}{
		{
			name:   "parse errors in two files",
			policy: filepath.Join(dir, "parse"),
			error:  a + ":5: rego_parse_error: unexpected } token (and 1 more errors)",
			pretty: a + ":5:1: rego_parse_error: unexpected } token\n" +
				"\t}\n" +
				"\t^\n" +
				b + ":4:13: rego_parse_error: unexpected eq token\n" +
				"\tinput.x = = 1\n" +
				"\t          ^",
		},
		{
			name:   "compile errors with their source lines",
			policy: filepath.Join(dir, "compile"),
			error:  p + ":3: rego_unsafe_var_error: var msg is unsafe (and 1 more errors)",
			pretty: p + ":3:46: rego_unsafe_var_error: var msg is unsafe\n" +
				"\tdecision := {\"action\": \"fulfill\", \"message\": msg} if {\n" +
				"\t                                             ^\n" +
				p + ":7:9: rego_unsafe_var_error: var level is unsafe\n" +
				"\trisk := level if input.tool.name == \"x\"\n" +
				"\t        ^",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(t.Context(), Options{Policies: []string{tc.policy}, Logger: quietLogger()})
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want a *LoadError", err, err)
			}
			if got := le.Error(); got != tc.error {
				t.Errorf("Error():\n%s\nwant:\n%s", got, tc.error)
			}
			if got := le.Pretty(); got != tc.pretty {
				t.Errorf("Pretty():\n%s\nwant:\n%s", got, tc.pretty)
			}
		})
	}
}

// TestLoadErrorPrettyOther: errors that are not Rego errors read the same
// in Pretty as in Error.
func TestLoadErrorPrettyOther(t *testing.T) {
	_, err := Load(t.Context(), Options{Policies: []string{filepath.Join(t.TempDir(), "nope.rego")}, Logger: quietLogger()})
	var le *LoadError
	if !errors.As(err, &le) || le.Pretty() != le.Error() {
		t.Fatalf("err = %v, Pretty differs from Error", err)
	}
}
