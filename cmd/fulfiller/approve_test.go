package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestKeysGenerate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "alice.key")
	out, errOut, code := cli(t, "", "keys", "generate", "--id", "alice", "--out", path)
	if code != 0 || !regexp.MustCompile(`^alice [A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "wrote the private key of alice to "+path) {
		t.Errorf("stderr %q", errOut)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi.Mode(), err)
	}
	_, errOut, code = cli(t, "", "keys", "generate", "--id", "alice", "--out", path)
	if code != 2 || !strings.Contains(errOut, "--out "+path+" exists; keys are never overwritten") {
		t.Errorf("overwrite: code %d %q", code, errOut)
	}
	if _, errOut, code = cli(t, "", "keys", "generate"); code != 2 || !strings.Contains(errOut, "--id is required") {
		t.Errorf("no id: code %d %q", code, errOut)
	}
}

func TestRunApproverKeysErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "approvers.keys")
	if err := os.WriteFile(bad, []byte("# on-call\nalice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\nbob not-a-key!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--approver-keys", bad)
	if code != 2 || errOut != "fulfiller: --approver-keys "+bad+":3: key of bob: not base64url without padding\n" {
		t.Errorf("code %d stderr %q", code, errOut)
	}
	missing := filepath.Join(dir, "nope.keys")
	if _, errOut, code = cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--approver-keys", missing); code != 2 || !strings.Contains(errOut, missing) {
		t.Errorf("missing file: code %d stderr %q", code, errOut)
	}
}

func TestApproveUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", "--id", "alice"}, "--gateway is required"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1"}, "--id is required"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "fulfiller"}, `--id "fulfiller" is the fulfiller's own id`},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--auto", "maybe"}, `--auto "maybe": want accept or decline`},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--reason", "x"}, "--reason is for --auto answers"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--key", "/nonexistent/alice.key"}, "--key open /nonexistent/alice.key: no such file or directory"},
	} {
		_, errOut, code := cli(t, "", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}
