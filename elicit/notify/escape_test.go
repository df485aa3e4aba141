package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit/notify"
)

// invisibleEvent is a prompt whose proposer, tool and arguments carry
// bidirectional and invisible characters, raw.
func invisibleEvent() notify.Event {
	return notify.Event{Type: notify.PromptOpened, Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Proposal: "p\u200b1",
		Proposer: "cod\u202eer", Method: "tools/call", Tool: "r\u200bun", Server: "sh", Digest: "56dcae76b714",
		Approvers: []string{"alice"}, Quorum: 1, Deadline: time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC),
		Arguments: json.RawMessage("{\"command\":\"ls \u2067# list the\u2069 && r\u200bm -rf /\"}")}
}

// mailText is a message's subject and its plain-text body, decoded.
func mailText(t *testing.T, m *notify.Mail, ev notify.Event) (subject, body string) {
	t.Helper()
	msg, err := m.Message(ev, []string{"alice@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if _, err := msg.WriteTo(&raw); err != nil {
		t.Fatal(err)
	}
	parsed, err := mail.ReadMessage(&raw)
	if err != nil {
		t.Fatal(err)
	}
	if subject, err = new(mime.WordDecoder).DecodeHeader(parsed.Header.Get("Subject")); err != nil {
		t.Fatal(err)
	}
	var r io.Reader = parsed.Body
	if strings.EqualFold(parsed.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return subject, strings.ReplaceAll(string(b), "\r\n", "\n")
}

// TestNotificationsEscapeInvisibleCharacters (issue 41, row 1): a mail and
// a Slack message show such characters escaped, as the cards do, in the
// names and in the arguments; the webhook's JSON carries them as \u
// escapes, the same text to a JSON reader.
func TestNotificationsEscapeInvisibleCharacters(t *testing.T) {
	ev := invisibleEvent()
	dir := notify.Directory{"alice": {Email: "alice@example.com"}}
	m := target(t, "smtp://mail.example:587?from=fulfiller@example.com", notify.Options{Directory: dir}).(*notify.Mail)
	subject, body := mailText(t, m, ev)
	s := target(t, "slack://hooks.slack.example/services/T0/B0/key", notify.Options{}).(*notify.Slack)
	slackText := s.Message(ev).Text
	for name, text := range map[string]string{"subject": subject, "body": body, "slack": slackText} {
		for _, r := range "\u2067\u2069\u200b\u202e" {
			if strings.ContainsRune(text, r) {
				t.Errorf("%s holds %U raw:\n%s", name, r, text)
			}
		}
		for _, want := range []string{`cod\u202eer`, `r\u200bun`} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %s:\n%s", name, want, text)
			}
		}
	}
	for name, text := range map[string]string{"body": body, "slack": slackText} {
		want := `"command": "ls \u2067# list the\u2069 && r\u200bm -rf /"`
		if name == "slack" {
			want = strings.ReplaceAll(want, "&", "&amp;")
		}
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks the arguments escaped, %s:\n%s", name, want, text)
		}
		if !strings.Contains(text, `p\u200b1`) {
			t.Errorf("%s lacks the proposal escaped:\n%s", name, text)
		}
	}
	// The webhook's body: \u escapes, the same text to a JSON reader.
	r, srv := newReceiver(t, "s3cret")
	if err := target(t, srv.URL+"/hook", notify.Options{Secret: []byte("s3cret")}).Send(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	got := r.wait(t, 1)[0]
	if want := `"proposer":"cod\u202eer"`; !strings.Contains(got, want) || strings.ContainsRune(got, '\u202e') {
		t.Errorf("webhook body lacks %s:\n%s", want, got)
	}
	var back notify.Event
	if err := json.Unmarshal([]byte(got), &back); err != nil || back.Proposer != ev.Proposer || back.Tool != ev.Tool {
		t.Errorf("read back %+v %v", back, err)
	}
}
