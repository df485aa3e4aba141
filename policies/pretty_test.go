package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
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

// TestReloadLogListsEveryError: a reload that fails logs every error of the
// load as a list attribute, each whole (file:line:col, source line,
// caret), two errors in two files both shown.
func TestReloadLogListsEveryError(t *testing.T) {
	var logs logBuffer
	dir := writeTree(t, map[string]string{"a.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"})
	e, err := Load(t.Context(), Options{Policies: []string{dir}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.rego"), filepath.Join(dir, "b.rego")
	writeFile(t, a, "package fulfiller\n\ndecision := {\"action\": \"fulfill\"} if {\n\tinput.method ==\n}\n")
	writeFile(t, b, "package fulfiller\n\nallow if {\n\t\tinput.x = = 1\n}\n")
	if err := e.Reload(t.Context()); err == nil {
		t.Fatal("reload of broken files succeeded")
	}
	var line struct {
		Msg    string   `json:"msg"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(logs.String())), &line); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	want := []string{
		a + ":5:1: rego_parse_error: unexpected } token\n\t}\n\t^",
		b + ":4:13: rego_parse_error: unexpected eq token\n\tinput.x = = 1\n\t          ^",
	}
	if !slices.Equal(line.Errors, want) {
		t.Errorf("errors attribute:\n%q\nwant:\n%q", line.Errors, want)
	}
}

// TestEveryCompileErrorAtOnce: a load reports all its compile errors, not
// OPA's default first ten.
func TestEveryCompileErrorAtOnce(t *testing.T) {
	var src strings.Builder
	src.WriteString("package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n")
	for i := range 12 {
		fmt.Fprintf(&src, "\nr%d := x%d\n", i, i)
	}
	dir := writeTree(t, map[string]string{"p.rego": src.String()})
	_, err := Load(t.Context(), Options{Policies: []string{dir}, Logger: quietLogger()})
	var le *LoadError
	if !errors.As(err, &le) || len(le.Rego) != 12 || le.More != 11 {
		t.Fatalf("err = %v: want 12 errors", err)
	}
	if got := le.Details()[11]; !strings.HasPrefix(got, filepath.Join(dir, "p.rego")+":27:8: rego_unsafe_var_error: var x11 is unsafe") {
		t.Errorf("last error %q", got)
	}
}
