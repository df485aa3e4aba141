package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// keys generate --prompt makes a fulfiller's prompt key, in the approver
// key's format, and prints the line each approver's --fulfiller-keys
// file needs.
func TestKeysGeneratePrompt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fulfiller.key")
	out, errOut, code := cli(t, "", "keys", "generate", "--prompt", "--id", "fulfiller", "--out", path)
	if code != 0 || !regexp.MustCompile(`^fulfiller [A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "wrote the private key of fulfiller to "+path+" (keep it secret); the line for each approver's --fulfiller-keys file:") {
		t.Errorf("stderr %q", errOut)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# fulfiller prompt key of fulfiller. Keep it secret: whoever holds it asks approvers in fulfiller's name.\n# Each approver's --fulfiller-keys file needs this line:\n# "+out) {
		t.Errorf("key file starts %q", data)
	}
	key, err := approver.LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := approval.ParseKeys(strings.NewReader(out))
	if err != nil || !keys["fulfiller"].Equal(key.Public()) {
		t.Errorf("the printed line is not the key's: %v", err)
	}
}

// run --prompt-key reads the key as run would, so --check fails on a bad
// one with one line naming the flag, exit 2.
func TestRunPromptKeyCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fulfiller.key")
	line, err := approver.WritePromptKeyFile(path, "fulfiller", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--check", "--policy", examplePolicies, "--prompt-key", path)
	if code != 0 || !strings.Contains(errOut, `msg="configuration is valid"`) {
		t.Errorf("good key: code %d stdout %q stderr %q", code, out, errOut)
	}
	if !strings.HasPrefix(line, "fulfiller ") {
		t.Errorf("public line %q", line)
	}
	_ = os.Chmod(path, 0o644)
	if _, errOut, code = cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--check", "--prompt-key", path); code != 2 || errOut != "fulfiller: --prompt-key "+path+" is readable by others (mode 0644); chmod 600 it\n" {
		t.Errorf("world-readable key: code %d stderr %q", code, errOut)
	}
	missing := filepath.Join(dir, "nope.key")
	if _, errOut, code = cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--check", "--prompt-key", missing); code != 2 || errOut != "fulfiller: --prompt-key open "+missing+": no such file or directory\n" {
		t.Errorf("missing key: code %d stderr %q", code, errOut)
	}
	if _, errOut, code = cliEnv(t, "", map[string]string{"FULFILLER_PROMPT_KEY": missing}, "run", "--gateway", "ws://127.0.0.1:1", "--check"); code != 2 || !strings.Contains(errOut, "--prompt-key open "+missing) {
		t.Errorf("from the environment: code %d stderr %q", code, errOut)
	}
}

// approve --fulfiller-keys: a bad file, or one without a key for a
// fulfiller whose prompts are shown, is one line naming the flag, exit 2,
// before anything is dialled.
func TestApproveFulfillerKeysErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.keys")
	_ = os.WriteFile(bad, []byte("fulfiller not-a-key!\n"), 0o644)
	good := filepath.Join(dir, "fulfillers.keys")
	_ = os.WriteFile(good, []byte("# the group\nful-a gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fulfiller-keys", bad}, "fulfiller: --fulfiller-keys " + bad + ":1: key of fulfiller: not base64url without padding\n"},
		{[]string{"--fulfiller-keys", filepath.Join(dir, "nope")}, "fulfiller: --fulfiller-keys open " + filepath.Join(dir, "nope") + ": no such file or directory\n"},
		{[]string{"--fulfiller-keys", good, "--fulfiller", "ful-a,ful-b"}, "fulfiller: --fulfiller-keys " + good + ": no key for fulfiller ful-b (add the line fulfiller keys generate --prompt printed)\n"},
	} {
		args := append([]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice"}, tc.args...)
		out, errOut, code := cli(t, "", args...)
		if code != 2 || errOut != tc.want || out != "" {
			t.Errorf("%v: code %d stdout %q stderr %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
