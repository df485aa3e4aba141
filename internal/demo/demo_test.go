package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/logbuf"
)

// scriptedRun is what one run of the scripted demo showed: its
// narration, how long it took, and what the files server and the
// fulfiller's tool list looked like on the way.
type scriptedRun struct {
	start time.Time // when the story began, to the second
	took  time.Duration
	text  string
	err   error
	// fsAnswers are fs's answers (mcp/response payloads) as the space
	// carried them; tools is the fulfiller's tool list once all 8 tools
	// were discovered.
	fsAnswers []string
	tools     []fulfill.ToolView
}

// scripted is the package's one run of the scripted demo, which
// TestDemoStoryCompletes, TestDemoFilesServerAnswersAsTheBridge and
// TestDemoInteractiveAnswersEveryCard each read: every run of the
// story is the same 15 steps, and three runs of it cost three times the
// CPU on a 2-core machine for nothing one run does not show.
var scripted struct {
	once sync.Once
	run  scriptedRun
}

// scriptedDemo runs the scripted demo once per test binary, as `fulfiller
// demo` does (no person, the default step timeout), and returns what it
// showed.
func scriptedDemo() *scriptedRun {
	scripted.once.Do(func() {
		r := &scripted.run
		var mu sync.Mutex
		var out syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r.start = time.Now().Truncate(time.Second)
		started := time.Now()
		r.err = Run(ctx, Options{Out: &out, PolicyTimeout: time.Minute, Started: func(run Running) {
			sub := run.Gateway.Subscribe(agent.SubscribeOptions{All: true})
			go func() {
				for env := range sub.C() {
					if env.From == "fs" && env.Kind == agent.KindResponse {
						mu.Lock()
						r.fsAnswers = append(r.fsAnswers, string(env.Payload))
						mu.Unlock()
					}
				}
			}()
			go func() {
				for ctx.Err() == nil {
					if v := run.Fulfiller.ToolViews(); len(v) >= 8 {
						mu.Lock()
						r.tools = v
						mu.Unlock()
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}})
		r.took = time.Since(started)
		r.text = out.String()
		// The subscription's goroutine may still be delivering the
		// last envelopes: a copy under the lock is what the tests read.
		mu.Lock()
		r.fsAnswers, r.tools = append([]string(nil), r.fsAnswers...), append([]fulfill.ToolView(nil), r.tools...)
		mu.Unlock()
	})
	return &scripted.run
}

func TestDemoStoryCompletes(t *testing.T) {
	t.Parallel() // a space and a temporary directory of its own
	run := scriptedDemo()
	if run.err != nil {
		t.Fatalf("demo failed: %v\n%s", run.err, run.text)
	}
	text, start := run.text, run.start
	for _, want := range []string{
		"└─ fulfilled  42 (",
		"chat to coder: no participant in the space offers tool \"list_users\"",
		"chat to mallory: proposals from mallory are not accepted here",
		"chat to coder: proposal payload has no method",
		"└─ ignored    proposal id seen before — no answer is sent",
		// Production delete: quorum 2, oncall-carol is away, both others approve.
		"├─ skipped    oncall-carol: not in the space",
		"├─ answered   oncall-alice approves: the migration is done; the old data can go",
		"├─ answered   oncall-bob approves: the migration is done; the old data can go",
		"└─ fulfilled  deleted 1 files under /srv/prod/db (",
		// Production write: bob declines, alice's open prompt is cancelled.
		"├─ answered   oncall-bob declines: production is frozen for the release; write to staging",
		"├─ cancelled  the prompt at oncall-alice (notifications/cancelled: disagree)",
		"chat to coder: oncall-bob declined: production is frozen for the release; write to staging",
		// Withdrawn while both are asked: both prompts are cancelled.
		"withdrawn  by the proposer", // written once its record is gone: after the cancels, or before
		"cancelled  the prompt at oncall-alice (notifications/cancelled: withdrawn)",
		"cancelled  the prompt at oncall-bob (notifications/cancelled: withdrawn)",
		// A grant: alice allows production log reads for 1h; the next
		// read needs nobody and names the grant; after the operator
		// revokes it, people are asked again.
		"├─ granted    grant-",
		" by oncall-alice: anyone who may propose in this space → read_file, path under /srv/prod/logs/ allowed for 1h, until ",
		"├─ decided    fulfill: read_file targets production; allowed by oncall-alice's grant grant-",
		"   ⚙ the operator revokes grant-",
		"├─ answered   oncall-alice approves: logs are fine to read",
		" 9  coder     delete_path  withdrawn           ✓",
		// A migration: the jobs server runs it as an MCP task, whose
		// result is relayed to the proposer.
		"├─ decided    fulfill: long-running job, run as a task",
		"├─ task       jobs runs it as MCP task ",
		"└─ fulfilled  migrated 3 steps (",
		", relayed to the proposer)",
		"14  coder     migrate      fulfilled           ✓",
		"15 of 15 proposals ended as the policy says.",
		// Every escalation is announced to the webhook, which verified it.
		"notify   a signed JSON webhook (run --notify) to the demo's receiver on loopback, which verifies every signature\n",
		"   └─ fulfilled  deleted 1 files under /srv/prod/db (",
		"   └─ rejected   disagree\n" +
			"      → webhook: prompt.opened for oncall-alice, oncall-bob (signature verified)\n" +
			"      → webhook: prompt.ended disagree (signature verified)\n" +
			"      chat to coder: oncall-bob declined",
		"      → webhook: prompt.ended cancelled (signature verified)\n\n10 a read-only tool nobody offers",
		// Payments: nobody on call answers; reminded after 1s, oncall-lead
		// asked after 2s approves, and the call is fulfilled once.
		"15 a payments change nobody on call answers: reminded, then escalated to oncall-lead ✓\n" +
			"   demo-15-write_file coder → everyone: tools/call write_file {\"path\":\"/srv/prod/payments/limits.yaml\",\"content\":\"daily: 20000\\n\"}\n" +
			"   ├─ received\n" +
			"   ├─ decided    escalate to oncall-alice, oncall-bob, oncall-carol (quorum 1): write_file targets production (/srv/prod/payments/limits.yaml) (policy ",
		"   ├─ reminded   oncall-alice, oncall-bob, oncall-carol (no answer yet: the decision's reminders)\n" +
			"   ├─ escalated  to oncall-lead (the decision's escalate_to)\n" +
			"   ├─ prompted   oncall-lead (elicitation/create)\n" +
			"   ├─ answered   oncall-lead approves: the new limit was agreed with finance\n",
		"   ├─ approved   by oncall-lead\n" +
			"   ├─ fulfilling mcp/request to fs\n" +
			"   └─ fulfilled  wrote 13 bytes to /srv/prod/payments/limits.yaml (",
		")\n      → webhook: prompt.opened for oncall-alice, oncall-bob (signature verified)\n" +
			"      → webhook: prompt.reminder still waiting for oncall-alice, oncall-bob, oncall-carol (signature verified)\n" +
			"      → webhook: prompt.escalated now asking oncall-lead (signature verified)\n" +
			"      → webhook: prompt.ended approved (signature verified)\n\nsummary",
		"15  coder     write_file   fulfilled           ✓",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("narration lacks %q", want)
		}
	}
	// One fulfilment of the payments change; the approvers asked first
	// have their prompts taken back.
	if n := strings.Count(text, "wrote 13 bytes to /srv/prod/payments/limits.yaml"); n != 1 {
		t.Errorf("the payments change was fulfilled %d times", n)
	}
	for _, want := range []string{"cancelled  the prompt at oncall-alice (notifications/cancelled: approved)", "cancelled  the prompt at oncall-bob (notifications/cancelled: approved)"} {
		if !strings.Contains(text[strings.Index(text, "\n15 a payments"):], want) {
			t.Errorf("step 15 lacks %q", want)
		}
	}
	if n := strings.Count(text, "signature verified"); n != 14 {
		t.Errorf("%d webhook lines, want 14: opened and ended for each of the 6 escalations, and step 15's reminder and escalation", n)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "→ webhook") && (strings.Contains(line, "path") || strings.Contains(line, "20000")) {
			t.Errorf("a webhook line shows the arguments: %s", line)
		}
	}
	if strings.Contains(text, "\033[") {
		t.Error("colour codes without Color")
	}
	checkTaskLine(t, text, start)
}

// checkTaskLine checks step 14's task line names the task's revision of
// the tasks spec and a deadline after the story began: it used to print
// "(working, spec ), followed until 00:00:00" (issue 42).
func checkTaskLine(t *testing.T, text string, start time.Time) {
	t.Helper()
	m := regexp.MustCompile(`├─ task       jobs runs it as MCP task \S+… \(working, spec (\d{4}-\d\d-\d\d)\), followed until (\d\d:\d\d:\d\d)\n`).FindStringSubmatch(text)
	if m == nil {
		t.Errorf("no task line with a spec and a deadline:\n%s", text)
		return
	}
	until, err := time.ParseInLocation("15:04:05", m[2], time.Local)
	if err != nil {
		t.Fatal(err)
	}
	// Time of day only: how far after the start, modulo a day.
	since := (until.Sub(time.Date(0, 1, 1, start.Hour(), start.Minute(), start.Second(), 0, time.Local)) + 24*time.Hour) % (24 * time.Hour)
	if since <= 0 || since > 2*time.Hour {
		t.Errorf("task followed until %s, %s after the story began at %s", m[2], since, start.Format("15:04:05"))
	}
}

// A task's line leaves out what is not known of it instead of printing
// it empty.
func TestTaskDetailsLeaveOutTheUnknown(t *testing.T) {
	for _, c := range []struct {
		task fulfill.TaskInfo
		want string
	}{
		{fulfill.TaskInfo{ID: "t"}, ""},
		{fulfill.TaskInfo{ID: "t", Status: "working"}, " (working)"},
		{fulfill.TaskInfo{ID: "t", Status: "working", Spec: "2025-11-25", Deadline: time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)}, " (working, spec 2025-11-25), followed until 03:04:05"},
	} {
		if got := taskDetails(c.task); got != c.want {
			t.Errorf("taskDetails(%+v) = %q, want %q", c.task, got, c.want)
		}
	}
}

// TestDemoInteractive is `fulfiller demo --interactive` with the person's
// keystrokes scripted: they approve the production delete on the card;
// the other escalations end without them (declined by oncall-bob,
// withdrawn), and their cards are taken away.
func TestDemoInteractive(t *testing.T) {
	t.Parallel() // mostly waiting: the story pauses for the person (3 s)
	var out, screen syncBuffer
	keys, typing := io.Pipe()
	defer typing.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The cards the person answers, in the order they come, and the keys
	// they press: approve the delete, approve the first log read with a
	// grant for 1h (the second of 15m, 1h, 8h), approve the read asked
	// about again after the revoke. The others end without them.
	answers := []struct{ card, prompt, keys string }{
		{"demo-4-delete_path", "a approve · d decline · c dismiss · q quit › ", "a\n"},
		{"demo-6-read_file", "a approve · l allow · d decline · g delegate · c dismiss · q quit › ", "l\n2\n"},
		{"demo-8-read_file", "a approve · l allow · d decline · g delegate · c dismiss · q quit › ", "a\n"},
	}
	go func() {
		deadline := time.Now().Add(45 * time.Second)
		for _, a := range answers {
			for time.Now().Before(deadline) {
				s := screen.String()
				if i := strings.Index(s, "▌ approval requested — "+a.card); i >= 0 && strings.Contains(s[i:], a.prompt) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			io.WriteString(typing, a.keys)
		}
	}()
	err := Run(ctx, Options{Out: &out, Approver: &approver.Terminal{In: keys, Out: &screen}, PolicyTimeout: time.Minute})
	if err != nil {
		t.Fatalf("demo failed: %v\n%s\nthe approver's screen:\n%s", err, out.String(), screen.String())
	}
	for _, want := range []string{
		"humans   you are oncall-alice: answer the approval cards below",
		"├─ answered   oncall-alice approves",
		"└─ fulfilled  deleted 1 files under /srv/prod/db (",
		" 4  coder     delete_path  fulfilled           ✓",
		"├─ granted    grant-",
		"├─ decided    fulfill: read_file targets production; allowed by oncall-alice's grant grant-",
		"15 of 15 proposals ended as the policy says.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("narration lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{
		"▌ approval requested — demo-4-delete_path",
		"needs      2 approvals of oncall-alice, oncall-bob, oncall-carol",
		"✓ sent approved — demo-4-delete_path: coder → delete_path on fs",
		"grantable  allow anyone who may propose in this space → read_file, path under /srv/prod/logs/ for 15m, 1h, 8h (policy's limit 8h)",
		"✓ sent approved, and calls like it for 1h — demo-6-read_file: coder → read_file on fs",
		"✓ outcome demo-4-delete_path: coder → delete_path on fs — fulfilled: the call was sent to fs",
		"✗ ended demo-5-write_file: coder → write_file on fs — decided by another approver: not approved",
		"✗ ended demo-9-delete_path: coder → delete_path on fs — withdrawn by the proposer",
	} {
		if !strings.Contains(screen.String(), want) {
			t.Errorf("the approver's screen lacks %q:\n%s", want, screen.String())
		}
	}
	if strings.Contains(screen.String(), "in the space") {
		t.Errorf("the demo's in-process fulfiller joining is news on the card:\n%s", screen.String())
	}
}

// syncBuffer is a log sink safe to read while it is written.
type syncBuffer = logbuf.Buffer

// fs plays a tool server behind mew bridge: on the wire its answers carry
// no jsonrpc and no id, and its tools/list no annotations; the demo's
// operator declares them (ToolMetadata), so the policy still tells its
// reads from its deletes, and every fs call the story makes is answered.
func TestDemoFilesServerAnswersAsTheBridge(t *testing.T) {
	t.Parallel()
	run := scriptedDemo()
	if run.err != nil {
		t.Fatal(run.err)
	}
	fsAnswers, tools := run.fsAnswers, run.tools
	if len(fsAnswers) < 6 {
		t.Fatalf("fs answered %d times: %q", len(fsAnswers), fsAnswers)
	}
	for _, a := range fsAnswers {
		if !strings.HasPrefix(a, `{"result":`) && !strings.HasPrefix(a, `{"error":`) || strings.Contains(a, `"jsonrpc"`) {
			t.Errorf("fs answered %s, not as the bridge does", a)
		}
	}
	found := 0
	for _, v := range tools {
		if v.Server != "fs" {
			continue
		}
		found++
		raw, _ := json.Marshal(v)
		if strings.Contains(string(raw), `"owner_annotations"`) || !strings.Contains(string(raw), `"annotations":{`) {
			t.Errorf("fs tool %s", raw)
		}
	}
	if found != 4 {
		t.Errorf("%d fs tools in %+v", found, tools)
	}
}

// The demo's receiver checks the signature as docs/operations.md tells an
// operator to: a request signed with another secret, or not signed, is
// refused and counted (Run then fails); a signed one is kept.
func TestReceiverVerifiesSignatures(t *testing.T) {
	r, err := startReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	body := []byte(`{"type":"prompt.opened","proposal":"p1","approvers":["oncall-alice"]}`)
	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, r.url, bytes.NewReader(body))
		if sig != "" {
			req.Header.Set(notify.SignatureHeader, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(notify.Sign([]byte("another secret"), body)); code != http.StatusUnauthorized {
		t.Errorf("another secret's signature: %d", code)
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("no signature: %d", code)
	}
	if r.refused() != 2 {
		t.Errorf("refused %d, want 2", r.refused())
	}
	if code := post(notify.Sign(r.secret, body)); code != http.StatusNoContent {
		t.Errorf("signed: %d", code)
	}
	r.mu.Lock()
	got := r.events["p1"]
	r.mu.Unlock()
	if len(got) != 1 || describeWebhook(got[0]) != "→ webhook: prompt.opened for oncall-alice (signature verified)" {
		t.Errorf("kept %+v", got)
	}
}
