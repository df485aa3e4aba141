package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// errorLines is what the CLI printed as its error: from the line starting
// "fulfiller: " to the end (log lines come before it).
func errorLines(stderr string) string {
	if i := strings.Index(stderr, "fulfiller: "); i >= 0 && (i == 0 || stderr[i-1] == '\n') {
		return stderr[i:]
	}
	return ""
}

// TestCheckFailsExactlyWhenRunWould: for every thing run opens or parses
// before it joins, `run --check` fails with the same message and exit 2
// exactly when `run` does, and passes exactly when run gets as far as
// joining (which fails here: nothing listens on the gateway's port).
func TestCheckFailsExactlyWhenRunWould(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	aFile := write("a-file", "x")
	tokenFile := write("token", "secret\n")
	strongToken := write("strong-token", "q0Jx3S9vLrT2mW8eYk4NcZ7hPu1AdG5fBn6RsEiOaVw=\n") // openssl rand -base64 32
	oneChar := write("one-char-token", "x\n")
	repeated := write("repeated-token", strings.Repeat("ab", 20)+"\n")
	emptyToken := write("empty-token", " \n")
	badKeys := write("keys", "alice not-a-key\n")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	inUse := busy.Addr().String()

	base := []string{"run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "2s"}
	tests := []struct {
		name string
		args []string
		want string // the error; "" when run gets as far as joining
	}{
		{"missing log directory", []string{"--decision-log", filepath.Join(dir, "nodir", "d.jsonl")},
			"fulfiller: --decision-log " + filepath.Join(dir, "nodir", "d.jsonl") + ": no such file or directory\n"},
		{"log is a directory", []string{"--decision-log", dir},
			"fulfiller: --decision-log " + dir + ": is a directory\n"},
		{"log under a file", []string{"--decision-log", filepath.Join(aFile, "d.jsonl")},
			"fulfiller: --decision-log " + filepath.Join(aFile, "d.jsonl") + ": not a directory\n"},
		{"address in use", []string{"--http", inUse},
			"fulfiller: --http " + inUse + ": address already in use\n"},
		{"all interfaces without a token", []string{"--http", ":0"},
			"fulfiller: --http :0 is reachable from other machines and no token guards the operator API: set --http-token-file or FULFILLER_HTTP_TOKEN, or bind 127.0.0.1\n"},
		{"empty token file", []string{"--token-file", emptyToken},
			"fulfiller: --token-file " + emptyToken + ": the file is empty\n"},
		{"missing http token file", []string{"--http-token-file", filepath.Join(dir, "nope")},
			"fulfiller: --http-token-file " + filepath.Join(dir, "nope") + ": no such file or directory\n"},
		{"token twice", []string{"--token", "x", "--token-file", tokenFile},
			"fulfiller: --token-file and --token (or FULFILLER_TOKEN) are both set: give one\n"},
		{"bad approver keys", []string{"--approver-keys", badKeys}, "fulfiller: --approver-keys "},
		// docs/operations.md's team inbox: run may start before serve has
		// made its passkeys file (nobody enrolled yet), not in a directory
		// that does not exist.
		{"approver keys not written yet", []string{"--approver-keys", filepath.Join(dir, "passkeys")}, ""},
		{"approver keys directory missing", []string{"--approver-keys", filepath.Join(dir, "nodir", "passkeys")},
			"fulfiller: --approver-keys " + filepath.Join(dir, "nodir", "passkeys") + ": no such file or directory\n"},
		{"broken policy", []string{"--policy", filepath.Join(testPolicies, "broken")},
			"fulfiller: " + filepath.Join(testPolicies, "broken", "policy.rego") + ":5:1: rego_parse_error: unexpected } token\n\t}\n\t^\n"},
		{"broken shadow policy", []string{"--policy", examplePolicies, "--shadow-policy", filepath.Join(testPolicies, "broken")},
			"fulfiller: --shadow-policy: " + filepath.Join(testPolicies, "broken", "policy.rego") + ":5:1: rego_parse_error: unexpected } token\n\t}\n\t^\n"},
		{"missing shadow data", []string{"--shadow-policy", examplePolicies, "--shadow-data", filepath.Join(dir, "nope.json")},
			"fulfiller: --shadow-policy: "},
		{"shadow data without a shadow policy", []string{"--shadow-data", aFile},
			"fulfiller: --shadow-data needs --shadow-policy\n"},
		{"shadow policy", []string{"--policy", examplePolicies, "--shadow-policy", examplePolicies}, ""},
		{"new log file", []string{"--decision-log", filepath.Join(dir, "new.jsonl"), "--http", "127.0.0.1:0"}, ""},
		{"existing log file", []string{"--decision-log", write("old.jsonl", "{}\n"), "--token-file", tokenFile}, ""},
		{"all interfaces with a token", []string{"--http", "0.0.0.0:0", "--http-token-file", strongToken, "--policy", examplePolicies}, ""},
		// Issue 41, row 10: a token anyone could guess guards nothing.
		{"all interfaces with a one-character token", []string{"--http", "0.0.0.0:0", "--http-token-file", oneChar},
			"fulfiller: --http 0.0.0.0:0 is reachable from other machines and the operator API's token is too weak (about 5 bits; want at least 128): make one with `openssl rand -base64 32`\n"},
		{"all interfaces with a short token", []string{"--http", ":0", "--http-token-file", tokenFile},
			"fulfiller: --http :0 is reachable from other machines and the operator API's token is too weak (about 28 bits; want at least 128): make one with `openssl rand -base64 32`\n"},
		{"all interfaces with a repetitive token", []string{"--http", ":0", "--http-token-file", repeated},
			"fulfiller: --http :0 is reachable from other machines and the operator API's token is too weak (about 2 distinct characters; want at least 128 bits): make one with `openssl rand -base64 32`\n"},
		{"loopback with a short token", []string{"--http", "127.0.0.1:0", "--http-token-file", oneChar}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, base...), tc.args...)
			_, checkErr, checkCode := cli(t, "", append(args, "--check")...)
			_, runErr, runCode := cli(t, "", args...)
			if tc.want == "" {
				if checkCode != 0 || runCode != 1 || !strings.HasPrefix(errorLines(runErr), "fulfiller: join ws://127.0.0.1:1 as fulfiller: ") {
					t.Fatalf("check: exit %d\n%s\nrun: exit %d\n%s\nwant check 0 and run failing only to join", checkCode, checkErr, runCode, runErr)
				}
				return
			}
			got := errorLines(checkErr)
			if checkCode != 2 || !strings.HasPrefix(got, tc.want) || (!strings.HasSuffix(tc.want, " ") && got != tc.want) {
				t.Errorf("check: exit %d, error:\n%s\nwant exit 2 and:\n%s", checkCode, got, tc.want)
			}
			if runCode != 2 || errorLines(runErr) != got {
				t.Errorf("run: exit %d, error:\n%s\nwant exit 2 and the same error as --check", runCode, errorLines(runErr))
			}
		})
	}
}

// TestCheckExampleConfig: the shipped example names
// /var/log/fulfiller/decisions.jsonl; where that directory does not exist
// `run --check` fails on it just as `run` does, and with the log pointed
// elsewhere the rest of the example is valid. --check creates nothing.
// The example sets no token (it belongs in the environment): without
// FULFILLER_TOKEN both refuse to start, as the join could never answer.
func TestCheckExampleConfig(t *testing.T) {
	if _, err := os.Stat("/var/log/fulfiller"); err == nil {
		t.Skip("/var/log/fulfiller exists on this machine; run would create its log there")
	}
	t.Chdir("../..")
	token := map[string]string{"FULFILLER_TOKEN": "test-token"}
	const noToken = "fulfiller: no participant token: set FULFILLER_TOKEN or --token-file (without one the gateway grants only its default capabilities, which cannot answer a proposal)\n"
	for _, args := range [][]string{{"--check"}, {"--gateway", "ws://127.0.0.1:1"}} {
		_, stderr, code := cli(t, "", append([]string{"run", "--config", "examples/fulfiller.yaml"}, args...)...)
		if got := errorLines(stderr); code != 2 || got != noToken {
			t.Errorf("%q without a token: exit %d, error %q, want 2 and %q", args, code, got, noToken)
		}
	}
	const want = "fulfiller: --decision-log /var/log/fulfiller/decisions.jsonl: no such file or directory\n"
	_, checkErr, code := cliEnv(t, "", token, "run", "--config", "examples/fulfiller.yaml", "--check")
	if got := errorLines(checkErr); code != 2 || got != want {
		t.Errorf("--check: exit %d, error %q, want 2 and %q", code, got, want)
	}
	_, runErr, code := cliEnv(t, "", token, "run", "--config", "examples/fulfiller.yaml", "--gateway", "ws://127.0.0.1:1")
	if got := errorLines(runErr); code != 2 || got != want {
		t.Errorf("run: exit %d, error %q, want 2 and %q", code, got, want)
	}

	logPath := filepath.Join(t.TempDir(), "decisions.jsonl")
	_, stderr, code := cliEnv(t, "", token, "run", "--config", "examples/fulfiller.yaml", "--check", "--decision-log", logPath, "--http", "127.0.0.1:0")
	if code != 0 || !strings.Contains(stderr, `"msg":"configuration is valid"`) || strings.Contains(stderr, `"level":"WARN"`) {
		t.Fatalf("--check with the log elsewhere: exit %d, want 0 without warnings\n%s", code, stderr)
	}
	if _, err := os.Stat(logPath); !os.IsNotExist(err) {
		t.Errorf("--check created the decision log (%v)", err)
	}
}

// TestCheckLeavesAnExistingLogAlone: proving the log writable writes
// nothing to it and does not touch its modification time.
func TestCheckLeavesAnExistingLogAlone(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(logPath, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(logPath, old, old); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--decision-log", logPath, "--check"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	fi, err := os.Stat(logPath)
	if err != nil || fi.Size() != 3 || !fi.ModTime().Equal(old) {
		t.Errorf("after --check: %v size %d mtime %v, want 3 bytes and %v", err, fi.Size(), fi.ModTime(), old)
	}
}

// TestConfigWarnings: run (and --check) warns, naming the flag but never
// its value, about a token given on the command line or written in the
// config file, a FULFILLER_* variable that sets nothing, and a missing
// --policy; a token from the environment draws no warning.
func TestConfigWarnings(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "fulfiller.yaml")
	if err := os.WriteFile(config, []byte("token: config-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	world := filepath.Join(dir, "world-readable")
	if err := os.WriteFile(world, []byte("file-secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env map[string]string, args ...string) string {
		t.Helper()
		stdout, stderr, code := cliEnv(t, "", env, append([]string{"run", "--gateway", "ws://127.0.0.1:1", "--check"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
		}
		return stderr
	}
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		want      []string
		forbidden []string
	}{
		{"token on the command line", nil, []string{"--token", "cli-secret", "--http-token", "http-secret"}, []string{
			"--token on the command line: any local user can read it (/proc/PID/cmdline, ps); use FULFILLER_TOKEN or --token-file",
			"--http-token on the command line: any local user can read it (/proc/PID/cmdline, ps); use FULFILLER_HTTP_TOKEN or --http-token-file",
			"no --policy given: the built-in policy rejects every proposal",
		}, []string{"cli-secret", "http-secret"}},
		{"token in the config file", nil, []string{"--config", config}, []string{
			"the config file sets token: whoever can read the file has it; use FULFILLER_TOKEN or --token-file",
		}, []string{"config-secret", "on the command line"}},
		{"token from the environment", map[string]string{"FULFILLER_TOKEN": "env-secret", "FULFILLER_MAX_PENDNG": "5", "FULFILLER_policy": "x"},
			[]string{"--policy", examplePolicies}, []string{
				"FULFILLER_MAX_PENDNG sets no flag and is ignored (misspelt?)",
				"FULFILLER_policy sets no flag and is ignored (misspelt?)",
			}, []string{"env-secret", "--token on the command line", "the config file sets", "no --policy given"}},
		{"token file readable by others", nil, []string{"--token-file", world}, []string{
			"--token-file " + world + " is readable by group or others (mode 0644): chmod 600 it",
		}, []string{"file-secret"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stderr := run(tc.env, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(stderr, "level=WARN msg=\""+w+"\"") {
					t.Errorf("no warning %q in:\n%s", w, stderr)
				}
			}
			for _, f := range tc.forbidden {
				if strings.Contains(stderr, f) {
					t.Errorf("%q in:\n%s", f, stderr)
				}
			}
		})
	}
}

// TestCheckWarnsAboutMissingData: the example policies without their
// data.yaml read data.settings, which nothing provides; the blocklist
// then never matches. --check (and run) warn on stderr, naming the path,
// and still exit 0: a policy may read data it does not need yet. With
// --data there is no warning.
func TestCheckWarnsAboutMissingData(t *testing.T) {
	const warning = `level=WARN msg="the policies read data.settings, which no --data provides: such a read is undefined, so the rules that need it never match"`
	_, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--policy", examplePolicies, "--check")
	if code != 0 || !strings.Contains(stderr, warning) || !strings.Contains(stderr, `msg="configuration is valid"`) {
		t.Errorf("without --data: exit %d, want 0 with the warning %s\n%s", code, warning, stderr)
	}
	_, stderr, code = cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--policy", examplePolicies, "--data", exampleData, "--check")
	if code != 0 || strings.Contains(stderr, "level=WARN") {
		t.Errorf("with --data: exit %d, want 0 and no warning\n%s", code, stderr)
	}
}
