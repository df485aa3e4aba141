//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.yaml.in/yaml/v3"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// walkStep is one `$ command` of a console block of docs/real-mew.md
// (continuation lines joined) and the output quoted under it.
type walkStep struct {
	cmd  string
	want []string
}

// walkthroughSteps reads every console block of the page in order.
func walkthroughSteps(t *testing.T, doc string) []walkStep {
	t.Helper()
	var steps []walkStep
	in := false
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == "```console":
			in = true
		case in && l == "```":
			in = false
		case in && strings.HasPrefix(l, "$ "):
			cmd := strings.TrimPrefix(l, "$ ")
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
			}
			steps = append(steps, walkStep{cmd: cmd})
		case in && len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		}
	}
	return steps
}

// TestRealMEWWalkthrough (issue 42) runs docs/real-mew.md as a reader
// would, command by command, with the in-repository space standing in
// for MEW's gateway (examples/space.yaml's capabilities, a token file per
// participant where `mew space up` writes them) and a file server as
// `fs` over $SPACE/files: every `fulfiller` command as written (the
// ports swapped for free ones), the shell lines that make the files they
// read, and each of the SDK agent's proposals made by the in-repo
// proposer. The output quoted under a fulfiller command is what it
// prints (keys, ids and times aside), and the policy revision quoted is
// the one the examples have.
func TestRealMEWWalkthrough(t *testing.T) {
	t.Parallel() // fulfiller and approvers as processes of their own: mostly waiting
	bin := fulfillerBinary(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "real-mew.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	steps := walkthroughSteps(t, doc)
	src, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	// The space `mew space up` would run, from examples/space.yaml.
	spaceYAML, err := os.ReadFile(filepath.Join(src, "examples", "space.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sf struct {
		Space        struct{ ID string } `yaml:"space"`
		Participants map[string]struct {
			Capabilities []agent.Capability `yaml:"capabilities"`
		} `yaml:"participants"`
	}
	if err := yaml.Unmarshal(spaceYAML, &sf); err != nil {
		t.Fatal(err)
	}
	cfg := space.Config{SpaceID: sf.Space.ID, Tokens: map[string][]agent.Capability{}}
	for id, p := range sf.Participants {
		cfg.Tokens[id+"-token-"+uuid.NewString()[:8]] = p.Capabilities
	}
	srv, err := space.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	gateway := strings.TrimPrefix(srv.URL(), "ws://")
	ops := freeAddr(t)

	out := t.TempDir()
	spaceDir := filepath.Join(out, "space")
	env := append(os.Environ(), "OUT="+out, "SPACE="+spaceDir, "CLONE="+src,
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	// As written, but with the test's ports and the test's fulfiller.
	expand := func(s string) string {
		s = strings.ReplaceAll(s, "127.0.0.1:28080", gateway)
		return strings.ReplaceAll(s, "127.0.0.1:29464", ops)
	}
	sh := func(cmd string) *exec.Cmd {
		c := exec.CommandContext(ctx, "sh", "-c", expand(cmd))
		c.Dir, c.Env = src, env
		c.WaitDelay = 5 * time.Second // a shell's children (sleep) may hold its output open
		return c
	}
	// normal replaces what differs from run to run: keys, ids, paths,
	// ports, the Go version and platform.
	normal := func(s string) string {
		for _, r := range []struct{ re, to string }{
			{`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, "ID"},
			{`(oncall-\w+) [A-Za-z0-9_-]{43}`, "$1 KEY"},
			{regexp.QuoteMeta(out), "$$OUT"},
			{regexp.QuoteMeta(gateway), "127.0.0.1:28080"},
			{`\(go[0-9.]+[^,]*, [a-z0-9]+/[a-z0-9]+,`, "(GO, PLATFORM,"},
		} {
			s = regexp.MustCompile(r.re).ReplaceAllString(s, r.to)
		}
		return s
	}
	sameOutput := func(step walkStep, got string) {
		t.Helper()
		want := strings.Join(step.want, "\n")
		if strings.Contains(want, "…") {
			// Cut in the page: each line quoted in full is printed.
			for _, w := range step.want {
				if w != "…" && !strings.Contains(w, "…") && !strings.Contains(normal(got), normal(w)) {
					t.Errorf("%s\nprinted:\n%s\nnot the quoted line:\n%s", step.cmd, got, w)
				}
			}
			return
		}
		if normal(strings.TrimRight(got, "\n")) != normal(want) {
			t.Errorf("%s\nprinted:\n%s\nthe page quotes:\n%s", step.cmd, got, want)
		}
	}

	var coder *agent.Client
	var prop *proposer.Proposer
	var runLog lockedBuffer
	var runStep walkStep
	type approverRun struct {
		step walkStep
		cmd  *exec.Cmd
		out  *lockedBuffer
		// stderr, where fulfiller warns.
		stderr *lockedBuffer
	}
	var approvers []approverRun
	ran := map[string]int{}
	began := time.Now()
	for _, step := range steps {
		cmd := step.cmd
		t.Logf("%5.1fs $ %s", time.Since(began).Seconds(), cmd)
		if strings.Contains(cmd, "go build") {
			continue // fulfillerBinary made that build (testenv.Program)
		}
		switch {
		case strings.HasPrefix(cmd, "fulfiller run "):
			ran["run"]++
			runStep = step
			c := sh("exec " + cmd) // the signal at the end reaches fulfiller
			c.Stderr = &runLog
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Process.Signal(os.Interrupt); _ = c.Wait() })
			coder = spacetest.Join(t, ctx, srv, "coder", tokenOf(t, cfg, "coder"))
			prop = spacetest.NewProposer(t, coder)
			poll.Until(t, "fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
		case strings.HasPrefix(cmd, "fulfiller approve "):
			ran["approve"]++
			var buf, stderr lockedBuffer
			c := sh("exec " + cmd)
			c.Stdout, c.Stderr = &buf, &stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
			approvers = append(approvers, approverRun{step, c, &buf, &stderr})
			id := regexp.MustCompile(`--id (\S+)`).FindStringSubmatch(cmd)[1]
			poll.Until(t, id+" waiting for prompts", func() bool {
				_, ok := coder.Participant(id)
				return ok && strings.Contains(buf.String(), "Waiting for approval requests")
			})
		case strings.HasPrefix(cmd, "fulfiller "):
			ran["fulfiller"]++
			b, err := sh(cmd).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, b)
			}
			sameOutput(step, string(b))
		case strings.HasPrefix(cmd, "mew space up "):
			// What it leaves: a token file per participant, and fs.
			for id := range sf.Participants {
				write(t, filepath.Join(spaceDir, ".mew", "tokens", id+".token"), tokenOf(t, cfg, id)+"\n", 0o600)
			}
			spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", tokenOf(t, cfg, "fs")), filesServer(filepath.Join(spaceDir, "files"))...)
		case strings.HasPrefix(cmd, "until curl "):
			ran["wait"]++
			if b, err := sh(cmd).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, b)
			}
		case strings.HasPrefix(cmd, "node propose.mjs "):
			ran["propose"]++
			f := regexp.MustCompile(`^node propose.mjs (\S+) (.*?) 2>\S+$`).FindStringSubmatch(cmd)
			args, err := sh("printf %s " + f[2]).Output()
			if err != nil {
				t.Fatal(err)
			}
			id := uuid.NewString()
			if _, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"`+f[1]+`","arguments":`+string(args)+`}}`)); err != nil {
				t.Fatal(err)
			}
			o, err := prop.Wait(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Join(step.want, "\n")
			if reason, ok := strings.CutPrefix(want, "not fulfilled: Proposal rejected by fulfiller: "); ok {
				if !o.Rejected || o.Reason != reason {
					t.Errorf("%s: %+v, want rejected %s", cmd, o, reason)
				}
			} else if !o.Fulfilled || !strings.HasPrefix(want, "fulfilled: ") {
				t.Errorf("%s: %+v, the page says %s", cmd, o, want)
			}
			// The approvers asked about it have answered and exited.
			for _, a := range approvers {
				// One decline settles the second write: the other approver's
				// prompt may be cancelled before they answer (on the page's
				// run, they answered first), and then they wait on.
				exited := make(chan error, 1)
				go func() { exited <- a.cmd.Wait() }()
				select {
				case err := <-exited:
					if err != nil {
						t.Errorf("%s: %v\n%s", a.step.cmd, err, a.out.String())
					}
				case <-time.After(10 * time.Second):
					_ = a.cmd.Process.Kill()
					<-exited
					if o.Rejected && o.Reason == "disagree" {
						// Its card may have ended before it answered, and
						// said so (the same as below); it waits for the
						// next one after that.
						got := strings.Split(strings.TrimRight(a.out.String(), "\n"), "\n")
						if endedByAnother(got[len(got)-1]) {
							got = got[:len(got)-1]
						}
						sameOutput(walkStep{cmd: a.step.cmd, want: a.step.want[:min(len(got), len(a.step.want))]}, strings.Join(got, "\n"))
						continue
					}
					t.Errorf("%s: still running 10s after the proposal it was asked about was settled\n%s", a.step.cmd, a.out.String())
				}
				for _, l := range strings.Split(a.stderr.String(), "\n") {
					if strings.Contains(l, "level=WARN") {
						t.Errorf("%s warned: %s", a.step.cmd, l)
					}
				}
				got := strings.Split(strings.TrimRight(a.out.String(), "\n"), "\n")
				if o.Rejected && o.Reason == "disagree" && len(got) == len(a.step.want) && endedByAnother(got[len(got)-1]) {
					// The other approver's decline came first (on the
					// page's run, this one's did): this card ended
					// without its answer, and said so.
					sameOutput(walkStep{cmd: a.step.cmd, want: a.step.want[:len(got)-1]}, strings.Join(got[:len(got)-1], "\n"))
					continue
				}
				sameOutput(a.step, a.out.String())
			}
			approvers = nil
		case strings.HasPrefix(cmd, "mkdir "), strings.HasPrefix(cmd, "cp "), strings.HasPrefix(cmd, "printf "),
			strings.HasPrefix(cmd, "(umask 077 && openssl "), strings.HasPrefix(cmd, "cat $SPACE"), strings.HasPrefix(cmd, "curl -s http://127.0.0.1:29464/"):
			ran["shell"]++
			b, err := sh(cmd).CombinedOutput()
			for deadline := time.Now().Add(30 * time.Second); err == nil && strings.HasSuffix(cmd, "/readyz") &&
				strings.Contains(string(b), `"not_ready"`) && time.Now().Before(deadline); {
				// Right after the start a loaded machine may still be
				// loading the grants, and /readyz says not_ready until
				// they are: ask again, as a reader would.
				time.Sleep(200 * time.Millisecond)
				b, err = sh(cmd).CombinedOutput()
			}
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, b)
			}
			if len(step.want) > 0 {
				sameOutput(step, string(b))
			}
		}
	}
	if ran["run"] != 1 || ran["approve"] != 4 || ran["propose"] != 4 || ran["wait"] != 1 || ran["fulfiller"] < 4 {
		t.Fatalf("ran %v of the page: want one run, four approvers, four proposals, the wait for fs, and keys", ran)
	}

	// fulfiller run's log: every line quoted is one it wrote, with the
	// same attributes, and the revision quoted is the one it loaded.
	logText := runLog.String()
	// The log lines quoted with each step below, too (not those of the
	// build before the rule-12 fix, quoted as "> level=…").
	quoted := slices.Clone(runStep.want)
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "level=") {
			quoted = append(quoted, "time=… "+l)
		}
	}
	for _, w := range quoted {
		m := regexp.MustCompile(`^time=… level=(\w+) msg=("[^"]*"|\S+)(.*)$`).FindStringSubmatch(w)
		if m == nil {
			continue
		}
		keys := func(attrs string) string {
			var k []string
			for _, kv := range regexp.MustCompile(`(?:^| )(\w+)=`).FindAllStringSubmatch(attrs, -1) {
				k = append(k, kv[1])
			}
			return strings.Join(k, " ")
		}
		found := false
		for _, l := range strings.Split(logText, "\n") {
			g := regexp.MustCompile(`^time=\S+ level=(\w+) msg=("[^"]*"|\S+)(.*)$`).FindStringSubmatch(l)
			if g != nil && g[1] == m[1] && g[2] == m[2] && keys(g[3]) == keys(m[3]) {
				found = true
			}
		}
		if !found {
			t.Errorf("fulfiller run never logged the quoted line:\n%s\nits log:\n%s", w, logText)
		}
	}
	got := regexp.MustCompile(`msg="policy loaded" revision=(sha256:[0-9a-f]+)`).FindStringSubmatch(logText)
	if got == nil {
		t.Fatalf("no policy loaded line:\n%s", logText)
	}
	for _, quoted := range regexp.MustCompile(`sha256:[0-9a-f]{16}`).FindAllString(doc, -1) {
		if quoted != got[1] {
			t.Errorf("the page quotes the revision %s; the examples' policies are %s", quoted, got[1])
		}
	}
}

// tokenOf is the space's token for participant id.
func tokenOf(t *testing.T, cfg space.Config, id string) string {
	t.Helper()
	for tok := range cfg.Tokens {
		if strings.HasPrefix(tok, id+"-token-") {
			return tok
		}
	}
	t.Fatalf("no token for %s", id)
	return ""
}

// filesServer plays @modelcontextprotocol/server-filesystem over dir for
// the tools the walkthrough calls, with its answers' words.
func filesServer(dir string) []toolserver.Tool {
	type pathArgs struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	inside := func(p string) (string, error) {
		if rel, err := filepath.Rel(dir, p); err != nil || strings.HasPrefix(rel, "..") {
			return "", fmt.Errorf("access denied - path outside allowed directories: %s", p)
		}
		return p, nil
	}
	schema := map[string]any{"type": "object"}
	return []toolserver.Tool{
		{Name: "read_text_file", InputSchema: schema, Call: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a pathArgs
			_ = json.Unmarshal(raw, &a)
			p, err := inside(a.Path)
			if err != nil {
				return "", err
			}
			b, err := os.ReadFile(p)
			return string(b), err
		}},
		{Name: "write_file", InputSchema: schema, Call: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a pathArgs
			_ = json.Unmarshal(raw, &a)
			p, err := inside(a.Path)
			if err != nil {
				return "", err
			}
			return "Successfully wrote to " + p, os.WriteFile(p, []byte(a.Content), 0o644)
		}},
	}
}

// endedByAnother reports whether line is fulfiller approve's word that a
// card ended without this approver's answer, because another approver's
// decided it.
func endedByAnother(line string) bool {
	return strings.HasPrefix(line, "ended ") && strings.Contains(line, "decided by another approver")
}
