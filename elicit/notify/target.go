package notify

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Options are what the targets need beside their URLs.
type Options struct {
	// Secret keys the webhooks' X-Fulfiller-Signature
	// (--notify-secret-file); required for http(s) targets.
	Secret []byte
	// Directory gives approvers' e-mail addresses and Slack ids
	// (--approver-directory); required for smtp(s) targets.
	Directory Directory
	// SMTPPassword logs in as the smtp URL's user.
	SMTPPassword string
	// HTTPClient posts webhooks [a client that follows no redirect: a
	// signed body goes where the operator said, nowhere else].
	HTTPClient *http.Client
	// TLSConfig is the SMTP client's [system roots, the URL's host].
	TLSConfig *tls.Config
}

// Schemes a --notify URL may have.
var Schemes = []string{"http", "https", "slack", "smtp", "smtps"}

// ParseTarget makes the target a --notify URL names. Errors say what is
// wrong with the URL without repeating it whole (it may hold a key).
func ParseTarget(raw string, opts Options) (Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL") // url's error quotes it whole
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%s: no host", shown(u))
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	switch u.Scheme {
	case "http", "https":
		if u.User != nil {
			return nil, fmt.Errorf("%s: no credentials in a webhook URL; requests are signed with --notify-secret-file", shown(u))
		}
		if strings.EqualFold(u.Hostname(), "hooks.slack.com") {
			return nil, fmt.Errorf("%s: a Slack incoming webhook is named slack://hooks.slack.com/services/…, so that it gets Slack's message format", shown(u))
		}
		if u.Scheme == "http" && !Loopback(u.Hostname()) {
			return nil, fmt.Errorf("%s: plain http only to loopback; use https", shown(u))
		}
		if len(opts.Secret) == 0 {
			return nil, fmt.Errorf("%s: webhooks are signed: --notify-secret-file is required", shown(u))
		}
		return &Webhook{url: u.String(), name: shown(u), secret: opts.Secret, client: client}, nil
	case "slack":
		if u.User != nil || u.Path == "" || u.Path == "/" {
			return nil, fmt.Errorf("%s: want slack://hooks.slack.com/services/T…/B…/… (the incoming webhook's https URL with slack:// in front)", shown(u))
		}
		hook := *u
		hook.Scheme = "https"
		return &Slack{url: hook.String(), name: shown(u), client: client, dir: opts.Directory}, nil
	case "smtp", "smtps":
		return parseMail(u, opts)
	}
	return nil, fmt.Errorf("%s: scheme %q is not one of %s", shown(u), u.Scheme, strings.Join(Schemes, ", "))
}

func parseMail(u *url.URL, opts Options) (*Mail, error) {
	m := &Mail{name: shown(u), host: u.Hostname(), ssl: u.Scheme == "smtps", dir: opts.Directory, password: opts.SMTPPassword, tls: opts.TLSConfig}
	if u.User != nil {
		if _, set := u.User.Password(); set {
			return nil, fmt.Errorf("%s: no password in the URL (it would show in ps and in logs); use --notify-smtp-password-file or FULFILLER_NOTIFY_SMTP_PASSWORD", shown(u))
		}
		m.user = u.User.Username()
	}
	m.port = 587
	if m.ssl {
		m.port = 465
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%s: port %q is not a port number", shown(u), p)
		}
		m.port = n
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%s: no path; the recipients come from --approver-directory", shown(u))
	}
	q := u.Query()
	for k := range q {
		if k != "from" {
			return nil, fmt.Errorf("%s: unknown parameter %q (only from)", shown(u), k)
		}
	}
	m.from = q.Get("from")
	if m.from == "" && strings.Contains(m.user, "@") {
		m.from = m.user
	}
	if m.from == "" {
		return nil, fmt.Errorf("%s: say who sends the mail: ?from=fulfiller@example.com", shown(u))
	}
	if err := checkAddress(m.from); err != nil {
		return nil, fmt.Errorf("%s: from: %w", shown(u), err)
	}
	if m.user != "" && m.password == "" {
		return nil, fmt.Errorf("%s: user %s needs a password: --notify-smtp-password-file or FULFILLER_NOTIFY_SMTP_PASSWORD", shown(u), m.user)
	}
	if m.user == "" && m.password != "" {
		return nil, fmt.Errorf("%s: an SMTP password is set but the URL names no user (smtp://user@host)", shown(u))
	}
	// Credentials never cross the network in the clear: without implicit
	// TLS, STARTTLS is required, except to a relay on this machine.
	m.requireTLS = !m.ssl && !Loopback(m.host)
	if len(opts.Directory) == 0 {
		return nil, fmt.Errorf("%s: e-mail goes to the approvers' addresses: --approver-directory is required", shown(u))
	}
	return m, nil
}

// shown is a URL as logs and errors may show it: scheme and host. A
// webhook's path or query, a Slack URL's path and an SMTP URL's user can
// be (or lead to) a secret.
func shown(u *url.URL) string {
	return u.Scheme + "://" + u.Host
}

// Loopback reports whether host is this machine: localhost or a loopback
// address. Another name could resolve anywhere.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}
