package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPolicyGuideFromScratch writes the from-scratch policy of
// docs/policies.md as the guide shows it (issue 42: the guide had no
// skeleton) and runs the commands it gives: its tests pass, eval fulfils
// the read, check --strict finds nothing. It also holds the guide to its
// warning about startswith and to the path helper it shows.
func TestPolicyGuideFromScratch(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "policies.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	dir := t.TempDir()
	files := 0
	for _, m := range regexp.MustCompile("(?s)```(?:rego|yaml|json)\n# mypolicy/([a-z_.]+)[^\n]*\n(.*?)```").FindAllStringSubmatch(guide, -1) {
		name, text := m[1], m[2]
		if strings.HasSuffix(name, ".rego") {
			text = "# mypolicy/" + name + "\n" + text // a Rego comment: kept, as written
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		files++
	}
	if files != 4 {
		t.Fatalf("the guide's skeleton has %d files, want 4 (policy, test, data, proposal)", files)
	}
	if stdout, stderr, code := cli(t, "", "test", dir); code != 0 || !strings.Contains(stdout, "2 passed, 0 failed") || stderr != "" {
		t.Errorf("fulfiller test mypolicy: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code := cli(t, "", "eval", "--policy", dir, "--data", filepath.Join(dir, "data.yaml"), "--input", filepath.Join(dir, "read.json"))
	if code != 0 || !strings.Contains(stdout, `"action": "fulfill"`) || stderr != "" {
		t.Errorf("fulfiller eval: exit %d\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code := cli(t, "", "check", "--strict", dir); code != 0 {
		t.Errorf("fulfiller check --strict: exit %d\n%s%s", code, stdout, stderr)
	}
	text := strings.Join(strings.Fields(guide), " ")
	for _, want := range []string{
		`"/srv/public/../etc/shadow" starts with "/srv/public/"`,
		"fulfill if paths.under(input.tool.arguments.path, \"/srv/public/\")",
		"try `..`, `//` and `%2e%2e`",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/policies.md lacks %q", want)
		}
	}
}
