package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestStateFlagErrors: a bad --state, --state-creds, --lease or --seen-ttl
// stops run and run --check alike before anything is joined or opened:
// exit 2, one line naming the flag, and a secret in a URL is never echoed.
func TestStateFlagErrors(t *testing.T) {
	dir := t.TempDir()
	aFile := filepath.Join(dir, "a-file")
	if err := os.WriteFile(aFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "2s"}
	tests := []struct {
		name string
		args []string
		want string // the whole error line
	}{
		{"password in the URL", []string{"--state", "nats://fulfiller:hunter2@nats.example:4222"},
			`fulfiller: --state URL for host "nats.example" carries credentials; use --state-creds FILE instead`},
		{"token in the URL", []string{"--state", "nats://s3cr3t-token@nats.example:4222,nats://b:4222"},
			`fulfiller: --state URL for host "nats.example" carries credentials; use --state-creds FILE instead`},
		{"wrong scheme", []string{"--state", "http://nats.example:4222"},
			`fulfiller: --state URL "http://nats.example:4222": scheme must be nats:// or tls://`},
		{"empty", []string{"--state", " "},
			`fulfiller: --state empty; want memory, a directory, or nats://host:port`},
		{"lease under a second", []string{"--lease", "500ms"}, `fulfiller: --lease 500ms: must be at least 1s`},
		{"seen-ttl zero", []string{"--seen-ttl", "0s"}, `fulfiller: --seen-ttl 0s: must be at least 1s`},
		{"creds without a cluster", []string{"--state", dir, "--state-creds", aFile},
			`fulfiller: --state-creds is only for a nats:// or tls:// --state, not ` + dir},
		{"missing creds file", []string{"--state", "nats://127.0.0.1:1", "--state-creds", filepath.Join(dir, "nope.creds")},
			`fulfiller: --state-creds ` + filepath.Join(dir, "nope.creds") + `: no such file or directory`},
		{"creds is a directory", []string{"--state", "nats://127.0.0.1:1", "--state-creds", dir},
			`fulfiller: --state-creds ` + dir + `: not a regular file`},
		{"state is a file", []string{"--state", aFile}, `fulfiller: --state ` + aFile + `: not a directory`},
		{"state under a file", []string{"--state", filepath.Join(aFile, "state")},
			`fulfiller: --state ` + filepath.Join(aFile, "state") + `: not a directory`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, base...), tc.args...)
			for _, check := range []bool{true, false} {
				a := args
				if check {
					a = append(a, "--check")
				}
				_, stderr, code := cli(t, "", a...)
				got := errorLines(stderr)
				if code != 2 || got != tc.want+"\n" {
					t.Errorf("check=%v: exit %d, error:\n%s\nwant exit 2 and:\n%s", check, code, got, tc.want)
				}
				for _, secret := range []string{"hunter2", "s3cr3t-token"} {
					if strings.Contains(stderr, secret) {
						t.Errorf("check=%v: the secret %q is in the output:\n%s", check, secret, stderr)
					}
				}
			}
		})
	}
}

// TestStateFlagsFromEnvAndConfig: the state flags come from FULFILLER_*
// and the config file like every other flag, with the same checks.
func TestStateFlagsFromEnvAndConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(cfg, []byte("lease: 200ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--config", cfg, "--check")
	if got := errorLines(stderr); code != 2 || got != "fulfiller: --lease 200ms: must be at least 1s\n" {
		t.Errorf("config: exit %d, %q", code, got)
	}
	_, stderr, code = cliEnv(t, "", map[string]string{"FULFILLER_SEEN_TTL": "10ms"}, "run", "--gateway", "ws://127.0.0.1:1", "--check")
	if got := errorLines(stderr); code != 2 || got != "fulfiller: --seen-ttl 10ms: must be at least 1s\n" {
		t.Errorf("env: exit %d, %q", code, got)
	}
}

// TestRunStateCheckCreatesNothing: --check accepts a state directory that
// does not exist yet (its parent takes it) and leaves it uncreated; run
// creates it 0700 before it joins. Neither warns about memory.
func TestRunStateCheckCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deep", "state")
	args := []string{"run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "1s", "--state", dir}
	_, stderr, code := cli(t, "", append(args, "--check")...)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("--check created %s (%v)", dir, err)
	}
	_, stderr, code = cli(t, "", args...)
	if code != 1 || !strings.HasPrefix(errorLines(stderr), "fulfiller: join ws://127.0.0.1:1 as fulfiller: ") {
		t.Fatalf("run: exit %d\n%s\nwant a failure to join only", code, stderr)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir after run: %v %v, want a directory 0700", fi, err)
	}
	if strings.Contains(stderr, "--state memory") {
		t.Errorf("memory warning with a state directory:\n%s", stderr)
	}
}

// TestRunStateMemoryWarns: --state memory opens the embedded store in
// memory and says that pending work dies with the process.
func TestRunStateMemoryWarns(t *testing.T) {
	_, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "1s", "--state", "memory", "--log-format", "json")
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	want := `"level":"WARN","msg":"--state memory: pending work (open prompts, fulfilments in flight, queued answers) dies with this process, and no other fulfiller can share it"`
	if !strings.Contains(stderr, want) {
		t.Errorf("no memory warning in:\n%s", stderr)
	}
	if !strings.Contains(stderr, `"msg":"state store open","state":"memory"`) {
		t.Errorf("no memory store opened:\n%s", stderr)
	}
}

// TestStateCredsReadableByOthersWarns: a creds file (it holds a private
// key seed) that group or others may read is accepted with a warning, as
// token files are.
func TestStateCredsReadableByOthersWarns(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "f.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--state", "nats://127.0.0.1:1", "--state-creds", creds, "--check")
	if code != 0 || !strings.Contains(stderr, "--state-creds "+creds+" is readable by group or others (mode 0644): chmod 600 it") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
}

// TestRunStoreUnreachable: an external store that cannot be reached stops
// run before it joins anything: exit 1, one line naming --state and the
// servers. --check does not contact the store, so it passes.
func TestRunStoreUnreachable(t *testing.T) {
	args := []string{"run", "--gateway", "ws://127.0.0.1:1", "--state", "nats://127.0.0.1:1"}
	if _, stderr, code := cli(t, "", append(args, "--check")...); code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	_, stderr, code := cli(t, "", args...)
	got := errorLines(stderr)
	if code != 1 || !strings.HasPrefix(got, "fulfiller: --state nats://127.0.0.1:1: state: connect to nats://127.0.0.1:1: ") || strings.Count(got, "\n") != 1 {
		t.Fatalf("exit %d, error %q", code, got)
	}
}

// TestStateCheckTriesTheDirectory (issue 42): --check tries what run will
// do with the state directory instead of asking access(2), which says
// yes to root for /proc/x: both fail alike, exit 2, and the error is all
// of stderr, with no warning about something else (the unsigned prompts)
// above it. A relative --state's error names the absolute path it means.
func TestStateCheckTriesTheDirectory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc, where no one can create a directory")
	}
	deny := t.TempDir()
	if err := os.Chmod(deny, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(deny, 0o700) })
	tests := []struct {
		name, chdir, state, want string
	}{
		{"under /proc", "", "/proc/x", "fulfiller: --state /proc/x: no such file or directory\n"},
		{"relative under /proc", "/proc", "x", "fulfiller: --state x: mkdir /proc/x: no such file or directory\n"},
		{"relative, two levels", "/proc", "x/y", "fulfiller: --state x/y: mkdir /proc/x/y: no such file or directory\n"},
	}
	if os.Geteuid() != 0 { // root may write anywhere
		tests = append(tests, struct{ name, chdir, state, want string }{
			"relative in a directory one may not write", deny, "state",
			"fulfiller: --state state: mkdir " + filepath.Join(deny, "state") + ": permission denied\n"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.chdir != "" {
				t.Chdir(tc.chdir)
			}
			args := []string{"run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "1s", "--state", tc.state}
			for _, check := range []bool{true, false} {
				a := args
				if check {
					a = append(a, "--check")
				}
				_, stderr, code := cli(t, "", a...)
				if code != 2 || stderr != tc.want {
					t.Errorf("check=%v: exit %d, stderr:\n%s\nwant exit 2 and only:\n%s", check, code, stderr, tc.want)
				}
			}
		})
	}
}

// TestStateCheckLeavesNothing: --check made and removed the directory it
// tried, and every parent it made; an existing directory keeps no file.
func TestStateCheckLeavesNothing(t *testing.T) {
	root := t.TempDir()
	existing := filepath.Join(root, "existing")
	if err := os.Mkdir(existing, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(root, "a", "b", "state"), existing} {
		if _, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--state", dir, "--check"); code != 0 {
			t.Fatalf("%s: exit %d\n%s", dir, code, stderr)
		}
	}
	var left []string
	_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, _ error) error { left = append(left, p); return nil })
	if want := []string{root, existing}; !slices.Equal(left, want) {
		t.Errorf("after --check: %q, want %q", left, want)
	}
}
