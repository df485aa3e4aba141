package notify

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"

	gomail "github.com/wneessen/go-mail"
)

// Mail e-mails each event to the approvers it names whose address the
// directory has: smtp://[user@]host[:587]?from=… (STARTTLS, required but
// to loopback) or smtps://[user@]host[:465]?from=… (implicit TLS).
type Mail struct {
	name, host string
	port       int
	ssl        bool
	requireTLS bool
	user       string
	password   string
	from       string
	dir        Directory
	tls        *tls.Config
}

// Kind implements Target.
func (m *Mail) Kind() string { return "smtp" }

// String implements Target.
func (m *Mail) String() string { return m.name }

// Wants implements wanter: only events that name someone with an
// address are sent.
func (m *Mail) Wants(ev Event) bool { return len(m.recipients(ev)) > 0 }

func (m *Mail) recipients(ev Event) []string {
	var to []string
	for _, id := range ev.Approvers {
		if p, ok := m.dir[id]; ok && p.Email != "" {
			to = append(to, p.Email)
		}
	}
	return to
}

// Send implements Target: one message to every recipient.
func (m *Mail) Send(ctx context.Context, ev Event) error {
	to := m.recipients(ev)
	if len(to) == 0 {
		return nil
	}
	msg, err := m.Message(ev, to)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	opts := []gomail.Option{gomail.WithPort(m.port), gomail.WithTLSConfig(m.tlsConfig()), gomail.WithoutSMTPUTF8()}
	switch {
	case m.ssl:
		opts = append(opts, gomail.WithSSL())
	case m.requireTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	default:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic))
	}
	if m.user != "" {
		// PLAIN: go-mail refuses it on a connection without TLS except
		// to localhost, as fulfiller's own rule says.
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthPlain), gomail.WithUsername(m.user), gomail.WithPassword(m.password))
	}
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, gomail.WithTimeout(max(timeUntil(dl), 1)))
	}
	c, err := gomail.NewClient(m.host, opts...)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPermanent, m.name, err)
	}
	if err := c.DialAndSendWithContext(ctx, msg); err != nil {
		return fmt.Errorf("%s: %w", m.name, m.scrub(err))
	}
	return nil
}

// scrub keeps the password out of an error, should a server echo it.
func (m *Mail) scrub(err error) error {
	if m.password == "" || !strings.Contains(err.Error(), m.password) {
		return err
	}
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), m.password, "[password]"))
}

func (m *Mail) tlsConfig() *tls.Config {
	if m.tls != nil {
		c := m.tls.Clone()
		if c.ServerName == "" {
			c.ServerName = m.host
		}
		return c
	}
	return &tls.Config{ServerName: m.host, MinVersion: tls.VersionTLS12}
}

// Message is the e-mail for ev: plain text, the inbox link as a plain
// link to the page (nothing in it answers the prompt). Text a proposer
// controls is quoted and defanged (quoted): it forms no link.
func (m *Mail) Message(ev Event, to []string) (*gomail.Msg, error) {
	msg := gomail.NewMsg()
	if err := msg.From(m.from); err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	if err := msg.To(to...); err != nil {
		return nil, fmt.Errorf("to: %w", err)
	}
	var subject string
	var b strings.Builder
	switch ev.Type {
	case PromptEnded:
		subject = fmt.Sprintf("[fulfiller] %s: %s", ending(ev, quoted), what(ev, quoted))
		fmt.Fprintf(&b, "The prompt is closed: %s.\n\n%s.\n", ending(ev, quoted), what(ev, quoted))
	default:
		subject = "[fulfiller] " + strings.ToLower(headline(ev.Type)) + ": " + what(ev, quoted)
		fmt.Fprintf(&b, "%s, and needs %d approval(s) from: %s.\n\n", what(ev, quoted), ev.Quorum, m.names(ev.Approvers))
		fmt.Fprintf(&b, "Answer before %s.\n", deadline(ev.Deadline))
	}
	fmt.Fprintf(&b, "\nProposal:    %s\nCall digest: %s (compare it with the card before you approve)\n", quoted(ev.Proposal), ev.Digest)
	if a := arguments(ev.Arguments); a != "" {
		fmt.Fprintf(&b, "\nArguments:\n%s\n", a)
	}
	if ev.URL != "" && ev.Type != PromptEnded {
		fmt.Fprintf(&b, "\nOpen your inbox to answer (sign in there; this link approves nothing):\n%s\n", ev.URL)
	}
	b.WriteString("\n-- \nSent by fulfiller. Approvals are given in the inbox or with fulfiller approve, never by replying to this mail.\n")
	msg.Subject(subject)
	msg.SetDate()
	msg.SetMessageID()
	msg.SetBodyString(gomail.TypeTextPlain, b.String())
	return msg, nil
}

// names lists approvers by the directory's names when it has them.
func (m *Mail) names(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if p, ok := m.dir[id]; ok && p.Name != "" {
			out[i] = fmt.Sprintf("%s (%s)", clean(p.Name), clean(id))
		} else {
			out[i] = clean(id)
		}
	}
	return strings.Join(out, ", ")
}
