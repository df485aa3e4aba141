package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunCheckNotify: run --check validates --notify and the files it
// needs as run does: exit 2 and one line naming the flag, never the
// secret; a good configuration passes.
func TestRunCheckNotify(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("secret", "hook-key-1234\n", 0o600)
	directory := write("approvers.yaml", "alice: {name: Alice, email: alice@example.com, slack: U012AB3CD}\n", 0o644)
	badDirectory := write("bad.yaml", "alice: {email: not-an-address}\n", 0o644)
	password := write("smtp-password", "mail-pass-5678\n", 0o600)
	// run refuses to start without a participant token (see check_test).
	t.Setenv("FULFILLER_TOKEN", "test-token")
	base := []string{"run", "--check", "--gateway=ws://127.0.0.1:1"}
	cases := []struct {
		args []string
		want string // "" for valid
	}{
		{[]string{"--notify", "https://hooks.example.com/fulfiller", "--notify-secret-file", secret}, ""},
		{[]string{"--notify", "slack://hooks.slack.com/services/T0/B0/key", "--approver-directory", directory}, ""},
		{[]string{"--notify", "smtps://bot@mail.example.com?from=fulfiller@example.com", "--notify-smtp-password-file", password, "--approver-directory", directory, "--inbox-url", "https://inbox.example.com/"}, ""},
		{[]string{"--notify", "https://hooks.example.com/fulfiller"}, "--notify https://hooks.example.com: webhooks are signed: --notify-secret-file is required"},
		{[]string{"--notify", "https://hooks.example.com/fulfiller", "--notify-secret-file", filepath.Join(dir, "missing")}, "--notify-secret-file"},
		{[]string{"--notify", "gopher://x/y"}, `--notify gopher://x: scheme "gopher" is not one of`},
		{[]string{"--notify", "smtp://mail.example.com?from=f@example.com", "--approver-directory", badDirectory}, "--approver-directory " + badDirectory + ": alice: email:"},
		{[]string{"--notify", "smtp://bot@mail.example.com?from=f@example.com", "--approver-directory", directory}, "needs a password"},
		{[]string{"--notify", "smtp://bot@mail.example.com?from=f@example.com", "--approver-directory", directory, "--notify-smtp-password", "pw-on-cmdline"}, "--notify-smtp-password on the command line"},
		{[]string{"--notify", "https://hooks.example.com/x", "--notify-secret-file", secret, "--inbox-url", "http://127.0.0.1:8765/?token=abc"}, "--inbox-url http://127.0.0.1:8765: no credentials, query or fragment"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			root := newRootCmd()
			root.SetArgs(append(append([]string{}, base...), tc.args...))
			var stderr strings.Builder
			root.SetOut(new(strings.Builder))
			root.SetErr(&stderr)
			err := root.Execute()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid configuration refused: %v", err)
				}
				if !strings.Contains(stderr.String(), "configuration is valid") {
					t.Errorf("log %s", stderr.String())
				}
			} else {
				if err == nil || exitCode(err) != 2 {
					t.Fatalf("err = %v (exit %d), want a usage error", err, exitCode(err))
				}
				if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
					t.Errorf("message %q does not say %q on one line", msg, tc.want)
				}
			}
			for _, s := range []string{"hook-key-1234", "mail-pass-5678", "pw-on-cmdline", "T0/B0/key", "token=abc"} {
				if strings.Contains(stderr.String(), s) || (err != nil && strings.Contains(err.Error(), s)) {
					t.Errorf("%q shown: %v\n%s", s, err, stderr.String())
				}
			}
		})
	}
}
