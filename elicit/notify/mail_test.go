package notify_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/internal/mailpittest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// mailpit runs Mailpit on loopback requiring STARTTLS and a login as
// bot/s3cret (internal/mailpittest).
func mailpit(t *testing.T) (smtpAddr, api string, pool *x509.CertPool) {
	t.Helper()
	m := mailpittest.Start(t, mailpittest.Options{TLS: true, Auth: "bot:s3cret"})
	return m.SMTP, m.API, m.Pool
}

func received(t *testing.T, api string, n int) []mailpittest.Message {
	t.Helper()
	return (&mailpittest.Server{API: api}).Received(t, n)
}

func messageText(t *testing.T, api, id string) string {
	t.Helper()
	return (&mailpittest.Server{API: api}).Text(t, id)
}

func TestMailToApproversOverSTARTTLS(t *testing.T) {
	smtpAddr, api, pool := mailpit(t)
	dir := notify.Directory{"alice": {Name: "Alice Liddell", Email: "alice@example.com"}} // bob has no address
	tg := target(t, fmt.Sprintf("smtp://bot@%s?from=fulfiller@example.com", smtpAddr), notify.Options{Directory: dir, SMTPPassword: "s3cret", TLSConfig: &tls.Config{RootCAs: pool}})
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{tg}, InboxURL: "https://inbox.example/approve", Metrics: c})
	run(t, n)
	n.Observe(opened(""))
	msgs := received(t, api, 1)
	m := msgs[0]
	if m.From.Address != "fulfiller@example.com" || len(m.To) != 1 || m.To[0].Address != "alice@example.com" {
		t.Errorf("from %s to %+v", m.From.Address, m.To)
	}
	if m.Subject != `[fulfiller] approval needed: "coder" wants to call "write_file" on "fs"` {
		t.Errorf("subject %q", m.Subject)
	}
	text := strings.ReplaceAll(messageText(t, api, m.ID), "\r\n", "\n")
	want := `"coder" wants to call "write_file" on "fs", and needs 1 approval(s) from: Alice Liddell (alice), bob.` + "\n\n" +
		"Answer before 2026-11-22 10:15:00 UTC.\n\n" +
		"Proposal:    \"p-write\"\nCall digest: 56dcae76b714 (compare it with the card before you approve)\n\n" +
		"Open your inbox to answer (sign in there; this link approves nothing):\nhttps://inbox.example/approve#proposal=p-write\n"
	if !strings.HasPrefix(text, want) {
		t.Errorf("body\n%s\nwant it to start with\n%s", text, want)
	}
	if strings.Contains(text, "Arguments") || strings.Contains(text, "/srv/prod/motd") {
		t.Errorf("the arguments are in the mail without notify_arguments:\n%s", text)
	}
	poll.Until(t, "the send counted", func() bool { return c.get("smtp sent") == 1 })

	// With notify_arguments they are in it.
	n.Observe(opened(`{"path":"/srv/prod/motd"}`))
	msgs = received(t, api, 2)
	if text := messageText(t, api, msgs[0].ID); !strings.Contains(text, "Arguments:\r\n{\r\n  \"path\": \"/srv/prod/motd\"\r\n}") {
		t.Errorf("no arguments in\n%s", text)
	}
}

func TestMailWrongPasswordFails(t *testing.T) {
	smtpAddr, _, pool := mailpit(t)
	dir := notify.Directory{"alice": {Email: "alice@example.com"}}
	tg := target(t, fmt.Sprintf("smtp://bot@%s?from=fulfiller@example.com", smtpAddr), notify.Options{Directory: dir, SMTPPassword: "wrong-pass", TLSConfig: &tls.Config{RootCAs: pool}})
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{tg}, Metrics: c, Attempts: 2, Backoff: time.Millisecond})
	run(t, n)
	n.Observe(opened(""))
	poll.Until(t, "the failure counted", func() bool { return c.get("smtp failed") == 1 })
}
