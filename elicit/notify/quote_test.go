package notify_test

import (
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/elicit/notify"
)

// TestProposerTextIsQuotedAndFormsNoLink (issue 41, row 12): a proposer
// chose its id, the proposal's id and the tool's name. A mail carried a
// forged "Sign in at https://…" in the proposer's id, which mail clients
// make a link of; a backtick in the proposal id ended Slack's code span
// and the rest became a link. Text a proposer controls is now quoted as
// such on every channel, and cannot form a link or formatting: in mail
// it is in double quotes it cannot close (its own " is shown as '), with
// its ':' and '.' defanged ([:], [.]); in
// Slack it is a code span it cannot leave (a backtick is shown as ').
func TestProposerTextIsQuotedAndFormsNoLink(t *testing.T) {
	ev := notify.Event{Type: notify.PromptOpened, Proposal: "p`<https://evil.example|click>` *now*", Proposer: "Sign in at https://evil.example/login",
		Method: "tools/call", Tool: `write_"file"`, Server: "fs", Digest: "56dcae76b714", Approvers: []string{"alice"}, Quorum: 1}
	dir := notify.Directory{"alice": {Email: "alice@example.com"}}
	m := target(t, "smtp://mail.example:587?from=fulfiller@example.com", notify.Options{Directory: dir}).(*notify.Mail)
	subject, body := mailText(t, m, ev)
	s := target(t, "slack://hooks.slack.example/services/T0/B0/key", notify.Options{}).(*notify.Slack)
	slackText := s.Message(ev).Text

	wantWhat := `"Sign in at https[:]//evil[.]example/login" wants to call "write_'file'" on "fs"`
	if want := "[fulfiller] approval needed: " + wantWhat; subject != want {
		t.Errorf("subject\n got %s\nwant %s", subject, want)
	}
	for _, want := range []string{wantWhat + ", and needs 1 approval(s) from: alice.", "Proposal:    \"p`<https[:]//evil[.]example|click>` *now*\"\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("mail body lacks %s:\n%s", want, body)
		}
	}
	wantSlack := "*Approval needed:* `Sign in at https[:]//evil[.]example/login` wants to call `write_\"file\"` on `fs`." +
		"\nAsked: alice (1 needed) · until 0001-01-01 00:00:00 UTC" +
		"\nProposal `p'&lt;https[:]//evil[.]example|click&gt;' *now*` · call digest `56dcae76b714`"
	if slackText != wantSlack {
		t.Errorf("slack\n got %s\nwant %s", slackText, wantSlack)
	}
	for name, text := range map[string]string{"subject": subject, "body": body, "slack": slackText} {
		if strings.Contains(text, "evil.example") || strings.Contains(text, "https://evil") {
			t.Errorf("%s holds a link of the proposer's:\n%s", name, text)
		}
	}
}
