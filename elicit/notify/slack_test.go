package notify_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/internal/poll"
)

// The JSON a Slack incoming webhook gets: mrkdwn text that mentions the
// approvers the directory knows, escapes what others wrote, and asks
// Slack not to unfurl the link.
func TestSlackWebhookMessage(t *testing.T) {
	bodies := make(chan string, 4)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/services/T0/B0/key" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		bodies <- string(b)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	dir := notify.Directory{"alice": {Name: "Alice", Slack: "U012AB3CD"}}
	hook := "slack://" + strings.TrimPrefix(srv.URL, "https://") + "/services/T0/B0/key"
	tg := target(t, hook, notify.Options{Directory: dir, HTTPClient: srv.Client()})
	if tg.String() != "slack://"+strings.TrimPrefix(srv.URL, "https://") {
		t.Errorf("logged as %q: the path is the hook's key", tg.String())
	}
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{tg}, InboxURL: "https://inbox.example/approve", Metrics: c})
	run(t, n)
	e := opened("")
	e.Prompt.Proposer = "<!channel> & co"
	n.Observe(e)
	n.Observe(ended("approved", ""))
	want := `{"text":"*Approval needed:* ` + "`" + `\u0026lt;!channel\u0026gt; \u0026amp; co` + "`" + ` wants to call ` + "`" + `write_file` + "`" + ` on ` + "`" + `fs` + "`" + `.\nAsked: \u003c@U012AB3CD\u003e, bob (1 needed) · until 2026-11-22 10:15:00 UTC\nProposal ` + "`p-write`" + ` · call digest ` + "`56dcae76b714`" + `\n\u003chttps://inbox.example/approve#proposal=p-write|Open the inbox\u003e","replace_original":false,"delete_original":false,"unfurl_links":false,"unfurl_media":false}`
	if got := <-bodies; got != want {
		t.Errorf("prompt.opened\n got %s\nwant %s", got, want)
	}
	wantEnded := `{"text":"*Prompt ended: approved.* ` + "`" + `coder` + "`" + ` wants to call ` + "`" + `write_file` + "`" + ` on ` + "`" + `fs` + "`" + `.\nProposal ` + "`p-write`" + ` · call digest ` + "`56dcae76b714`" + `","replace_original":false,"delete_original":false,"unfurl_links":false,"unfurl_media":false}`
	if got := <-bodies; got != wantEnded {
		t.Errorf("prompt.ended\n got %s\nwant %s", got, wantEnded)
	}
	poll.Until(t, "the sends counted", func() bool { return c.get("slack sent") == 2 })
}

func TestParseTargetRefuses(t *testing.T) {
	dir := notify.Directory{"alice": {Email: "alice@example.com"}}
	for _, tc := range []struct{ url, want string }{
		{"ftp://example.com/x", `ftp://example.com: scheme "ftp" is not one of http, https, slack, smtp, smtps`},
		{"https://example.com/hook", "https://example.com: webhooks are signed: --notify-secret-file is required"},
		{"http://example.com/hook", "http://example.com: plain http only to loopback; use https"},
		{"https://hooks.slack.com/services/T/B/key", "https://hooks.slack.com: a Slack incoming webhook is named slack://hooks.slack.com/services/…, so that it gets Slack's message format"},
		{"slack://hooks.slack.com", "slack://hooks.slack.com: want slack://hooks.slack.com/services/T…/B…/… (the incoming webhook's https URL with slack:// in front)"},
		{"smtp://bot:hunter2@mail.example.com", "smtp://mail.example.com: no password in the URL (it would show in ps and in logs); use --notify-smtp-password-file or FULFILLER_NOTIFY_SMTP_PASSWORD"},
		{"smtp://mail.example.com", "smtp://mail.example.com: say who sends the mail: ?from=fulfiller@example.com"},
		{"smtp://bot@mail.example.com?from=bot@example.com", "smtp://mail.example.com: user bot needs a password: --notify-smtp-password-file or FULFILLER_NOTIFY_SMTP_PASSWORD"},
	} {
		_, err := notify.ParseTarget(tc.url, notify.Options{Directory: dir})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v\nwant %s", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password", tc.url)
		}
	}
	if _, err := notify.ParseTarget("smtp://mail.example.com?from=bot@example.com", notify.Options{}); err == nil || !strings.Contains(err.Error(), "--approver-directory is required") {
		t.Errorf("smtp without a directory: %v", err)
	}
}

func TestLoadDirectory(t *testing.T) {
	d, err := notify.LoadDirectory(writeFile(t, "dir.yaml", "alice: {name: Alice Liddell, email: alice@example.com, slack: U012AB3CD}\nbob:\n  email: bob@example.com\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d["alice"] != (notify.Person{Name: "Alice Liddell", Email: "alice@example.com", Slack: "U012AB3CD"}) || d["bob"].Email != "bob@example.com" {
		t.Errorf("directory %+v", d)
	}
	if _, err := notify.LoadDirectory(writeFile(t, "dir.json", `{"alice":{"email":"alice@example.com"}}`)); err != nil {
		t.Errorf("JSON: %v", err)
	}
	for text, want := range map[string]string{
		"alice: {email: 'Alice <alice@example.com>'}": `alice: email: "Alice <alice@example.com>" is not a plain e-mail address`,
		"alice: {mail: alice@example.com}":            "field mail not found",
		"alice: {slack: alice}":                       `alice: slack "alice" is not a Slack member id`,
		"alice: {name: Alice}":                        "alice: neither email nor slack",
	} {
		_, err := notify.LoadDirectory(writeFile(t, "dir.yaml", text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}

// A reminder and an escalation read as such, and mention the approvers
// they are for; the deadline is the prompt's, unchanged.
func TestSlackReminderAndEscalated(t *testing.T) {
	bodies := make(chan string, 4)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	dir := notify.Directory{"lead": {Slack: "U0LEAD"}}
	tg := target(t, "slack://"+strings.TrimPrefix(srv.URL, "https://")+"/services/T0/B0/key", notify.Options{Directory: dir, HTTPClient: srv.Client()})
	n := notify.New(notify.Config{Targets: []notify.Target{tg}})
	run(t, n)
	rem := opened("")
	rem.Kind, rem.Prompt.Asked = elicit.EventReminded, []string{"alice"}
	n.Observe(rem)
	esc := opened("")
	esc.Kind, esc.Prompt.Asked = elicit.EventEscalated, []string{"lead"}
	n.Observe(esc)
	for _, want := range []string{
		`{"text":"*Reminder: approval still needed:* ` + "`coder` wants to call `write_file` on `fs`" + `.\nAsked: alice (1 needed) · until 2026-11-22 10:15:00 UTC\nProposal ` + "`p-write`" + ` · call digest ` + "`56dcae76b714`" + `","replace_original":false,"delete_original":false,"unfurl_links":false,"unfurl_media":false}`,
		`{"text":"*Escalated to you: approval needed:* ` + "`coder` wants to call `write_file` on `fs`" + `.\nAsked: \u003c@U0LEAD\u003e (1 needed) · until 2026-11-22 10:15:00 UTC\nProposal ` + "`p-write`" + ` · call digest ` + "`56dcae76b714`" + `","replace_original":false,"delete_original":false,"unfurl_links":false,"unfurl_media":false}`,
	} {
		if got := <-bodies; got != want {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
}
