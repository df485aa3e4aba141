package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goInternals are what an operator should never have to read in an error:
// the parser or system call that failed.
var goInternals = regexp.MustCompile(`strconv\.|time: invalid|\b(stat|open|mkdir|listen tcp|lookup|bind):? |invalid argument .* for .* flag`)

// saidTwice returns the flag named twice in msg, or the words that follow
// a flag and repeat its name ("--state state:", "--decision-log decision
// log:"), or "".
func saidTwice(msg string) string {
	words := strings.Fields(msg)
	seen := map[string]bool{}
	for i, w := range words {
		if !strings.HasPrefix(w, "--") {
			continue
		}
		name := strings.Trim(w, "-:,()\"")
		if seen[name] {
			return w
		}
		seen[name] = true
		for n := 1; n <= 2 && i+n < len(words); n++ {
			next := strings.ToLower(strings.Trim(strings.Join(words[i+1:i+1+n], "-"), ":,\""))
			if next == name {
				return w + " " + strings.Join(words[i+1:i+1+n], " ")
			}
		}
	}
	return ""
}

// TestErrorsInWords: each bad input an operator can give run (a flag, its
// FULFILLER_* variable, a config key, a file a flag names) ends with
// exit 2 and exactly one line that names the flag or the file once and
// says what is wrong in words, not in Go's (strconv.ParseInt: parsing…,
// stat …, listen tcp …).
func TestErrorsInWords(t *testing.T) {
	for _, msg := range []string{"--state state: URL", "--decision-log decision log: open x", "--policy x: see --policy"} {
		if saidTwice(msg) == "" {
			t.Fatalf("saidTwice(%q) finds nothing", msg)
		}
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	aFile := write("a-file", "x")
	badConfig := write("bad.yaml", "max-pending: lots\n")
	nope := filepath.Join(dir, "nope")
	inUse, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inUse.Close()
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-pending", "abc"}, nil, `--max-pending "abc": not a whole number`},
		{[]string{"--max-pending", "99999999999999999999"}, nil, `--max-pending "99999999999999999999": out of range`},
		{[]string{"--pending-ttl", "10"}, nil, `--pending-ttl "10": not a duration (a number with a unit: 300ms, 30s, 5m, 1h)`},
		{[]string{"--max-frame", "big"}, nil, `--max-frame "big": not a size (bytes, or a number with KiB, MiB or GiB)`},
		{[]string{"--status-chats=maybe"}, nil, `--status-chats "maybe": want true or false`},
		{nil, map[string]string{"FULFILLER_MAX_PENDING": "abc"}, `FULFILLER_MAX_PENDING "abc": not a whole number`},
		{nil, map[string]string{"FULFILLER_LEASE": "5"}, `FULFILLER_LEASE "5": not a duration (a number with a unit: 300ms, 30s, 5m, 1h)`},
		{[]string{"--config", badConfig}, nil, "config " + badConfig + `: key max-pending "lots": not a whole number`},
		{[]string{"--config", nope}, nil, "config " + nope + ": no such file or directory"},
		{[]string{"--state", "nats://u:secret@nats.example:4222"}, nil, `--state URL for host "nats.example" carries credentials; use --state-creds FILE instead`},
		{[]string{"--state", "ftp://x"}, nil, `--state URL "ftp://x": scheme must be nats:// or tls://`},
		{[]string{"--state", filepath.Join(aFile, "state")}, nil, "--state " + filepath.Join(aFile, "state") + ": not a directory"},
		{[]string{"--state", "nats://127.0.0.1:1", "--state-creds", nope}, nil, "--state-creds " + nope + ": no such file or directory"},
		{[]string{"--decision-log", filepath.Join(nope, "d.jsonl")}, nil, "--decision-log " + filepath.Join(nope, "d.jsonl") + ": no such file or directory"},
		{[]string{"--decision-log", dir}, nil, "--decision-log " + dir + ": is a directory"},
		{[]string{"--policy", nope}, nil, "--policy " + nope + ": no such file or directory"},
		{[]string{"--policy", aFile}, nil, "--policy " + aFile + ": not a .rego file or a .tar.gz bundle (data documents go in --data)"},
		{[]string{"--policy", examplePolicies, "--data", nope + ".yaml"}, nil, "--data " + nope + ".yaml: no such file or directory"},
		{[]string{"--approver-keys", filepath.Join(nope, "keys")}, nil, "--approver-keys " + filepath.Join(nope, "keys") + ": no such file or directory"},
		{[]string{"--token-file", nope}, map[string]string{}, "--token-file " + nope + ": no such file or directory"},
		{[]string{"--http-token-file", nope}, nil, "--http-token-file " + nope + ": no such file or directory"},
		{[]string{"--http", "127.0.0.1:abc"}, nil, `--http "127.0.0.1:abc": want HOST:PORT, e.g. 127.0.0.1:9464 (0.0.0.0:9464 for every interface)`},
		{[]string{"--http", "9464"}, nil, `--http "9464": want HOST:PORT, e.g. 127.0.0.1:9464 (0.0.0.0:9464 for every interface)`},
		{[]string{"--http", inUse.Addr().String()}, nil, "--http " + inUse.Addr().String() + ": address already in use"},
		{nil, map[string]string{"FULFILLER_TOKEN": ""}, "no participant token: set FULFILLER_TOKEN or --token-file (without one the gateway grants only its default capabilities, which cannot answer a proposal)"},
	}
	for _, tc := range tests {
		for _, check := range []bool{true, false} {
			args := append([]string{"run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "1s"}, tc.args...)
			if check {
				args = append(args, "--check")
			}
			_, stderr, code := cliEnv(t, "", tc.env, args...)
			got := errorLines(stderr)
			if want := "fulfiller: " + tc.want + "\n"; code != 2 || got != want {
				t.Errorf("%q %v: exit %d, error\n%s\nwant exit 2 and\n%s", args, tc.env, code, got, want)
			}
			if m := goInternals.FindString(got); m != "" {
				t.Errorf("%q: %q reads %q", args, got, m)
			}
			if m := saidTwice(got); m != "" {
				t.Errorf("%q: %q says %q twice", args, got, m)
			}
			if strings.Count(got, "\n") != 1 {
				t.Errorf("%q: not one line: %q", args, got)
			}
		}
	}
}
