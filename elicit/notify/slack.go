package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/slack-go/slack"
)

// Slack posts each event to a Slack incoming webhook, named
// slack://hooks.slack.com/services/… (the hook's https URL, with slack://
// in front, so that it is not mistaken for a signed JSON webhook).
type Slack struct {
	url, name string
	client    *http.Client
	dir       Directory
}

// Kind implements Target.
func (s *Slack) Kind() string { return "slack" }

// String implements Target: the hook's path is its key, never shown.
func (s *Slack) String() string { return s.name }

// Send implements Target.
func (s *Slack) Send(ctx context.Context, ev Event) error {
	err := slack.PostWebhookCustomHTTPContext(ctx, s.url, s.client, s.Message(ev))
	if err == nil {
		return nil
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return statusError(s.name, sc.Code, sc.Status)
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return fmt.Errorf("%s: rate limited (retry after %s)", s.name, rl.RetryAfter)
	}
	return fmt.Errorf("%s: %w", s.name, unURL(errors.Unwrap(err)))
}

// Message is what the webhook gets for ev: mrkdwn text mentioning the
// approvers the directory knows by Slack id. Links are not unfurled (an
// unfurler fetches them), and text a proposer controls is a code span it
// cannot leave (code), so a proposer named <!channel> pings nobody and a
// proposal id forms no link or formatting.
func (s *Slack) Message(ev Event) *slack.WebhookMessage {
	no := false
	var b strings.Builder
	switch ev.Type {
	case PromptEnded:
		fmt.Fprintf(&b, "*Prompt ended: %s.* %s.", ending(ev, code), what(ev, code))
	default:
		fmt.Fprintf(&b, "*%s:* %s.", headline(ev.Type), what(ev, code))
		fmt.Fprintf(&b, "\nAsked: %s (%d needed) · until %s", s.mentions(ev.Approvers), ev.Quorum, deadline(ev.Deadline))
	}
	fmt.Fprintf(&b, "\nProposal %s · call digest `%s`", code(ev.Proposal), ev.Digest)
	if a := arguments(ev.Arguments); a != "" {
		fmt.Fprintf(&b, "\nArguments:\n```%s```", esc(strings.ReplaceAll(a, "```", "` ` `")))
	}
	if ev.URL != "" && ev.Type != PromptEnded {
		fmt.Fprintf(&b, "\n<%s|Open the inbox>", esc(ev.URL))
	}
	return &slack.WebhookMessage{Text: b.String(), UnfurlLinks: &no, UnfurlMedia: &no}
}

// mentions names approvers: <@U…> for those with a Slack id.
func (s *Slack) mentions(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if p, ok := s.dir[id]; ok && p.Slack != "" {
			out[i] = "<@" + p.Slack + ">"
		} else {
			out[i] = esc(clean(id))
		}
	}
	return strings.Join(out, ", ")
}

// code shows text a proposer controls as a Slack code span, where mrkdwn
// neither formats nor links: a backtick, which would end the span, is
// shown as ', and the text is defanged and escaped besides.
func code(s string) string {
	return "`" + esc(strings.ReplaceAll(defang(s), "`", "'")) + "`"
}

// esc escapes Slack mrkdwn's control characters (&, <, >), as Slack
// asks: they start links and mentions.
var esc = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
