package main

import (
	"log/slog"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/elicit/notify"
)

// notifyFlags are run's flags for reaching approvers outside the space
// (docs/operations.md, "Notifications").
type notifyFlags struct {
	targets          []string
	secretFile       string
	smtpPassword     string // only from FULFILLER_NOTIFY_SMTP_PASSWORD
	smtpPasswordFile string
	directory        string
	inboxURL         string
}

var (
	notifySecret = secretFlag{flag: "notify-secret", fileFlag: "notify-secret-file"}
	smtpPassword = secretFlag{flag: "notify-smtp-password", fileFlag: "notify-smtp-password-file"}
)

func (n *notifyFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&n.targets, "notify", nil, "tell approvers outside the space when a prompt opens and ends (repeatable): https://… (signed JSON), slack://hooks.slack.com/services/… (a Slack incoming webhook), smtp://[user@]host[:587]?from=ADDR or smtps://… (e-mail to --approver-directory); a URL may hold a key: prefer FULFILLER_NOTIFY or the config file")
	f.StringVar(&n.secretFile, "notify-secret-file", "", "`FILE` holding the key of the webhooks' X-Fulfiller-Signature HMAC (read once at start, trimmed; mode 0600); required with an http(s) --notify")
	f.StringVar(&n.smtpPassword, "notify-smtp-password", "", "the SMTP password, only from FULFILLER_NOTIFY_SMTP_PASSWORD (refused on the command line)")
	_ = f.MarkHidden("notify-smtp-password")
	f.StringVar(&n.smtpPasswordFile, "notify-smtp-password-file", "", "`FILE` holding the password of the smtp(s) --notify URL's user (read once at start, trimmed; mode 0600)")
	f.StringVar(&n.directory, "approver-directory", "", "`FILE` (YAML or JSON) mapping approver ids to name, email and slack member id, for --notify")
	f.StringVar(&n.inboxURL, "inbox-url", "", "the approval inbox's page (https://…): notifications link to it; never a link that approves")
}

// prepare reads what the flags name and makes the targets: run and
// --check both go through here. nil without --notify.
func (n *notifyFlags) prepare(log *slog.Logger, fs *pflag.FlagSet) ([]notify.Target, error) {
	if fs != nil {
		if f := fs.Lookup("notify-smtp-password"); f != nil && f.Changed && flagSource(f) == "command line" {
			return nil, usageErrorf("--notify-smtp-password on the command line: any local user can read it; use FULFILLER_NOTIFY_SMTP_PASSWORD or --notify-smtp-password-file")
		}
	}
	if n.inboxURL != "" {
		if err := checkInboxURL(n.inboxURL); err != nil {
			return nil, err
		}
	}
	if len(n.targets) == 0 {
		for name, v := range map[string]string{"--notify-secret-file": n.secretFile, "--approver-directory": n.directory, "--inbox-url": n.inboxURL, "--notify-smtp-password-file": n.smtpPasswordFile} {
			if v != "" {
				log.Warn(name + " has no effect without --notify")
			}
		}
		return nil, nil
	}
	var opts notify.Options
	secret, err := notifySecret.resolve(log, "", n.secretFile)
	if err != nil {
		return nil, err
	}
	opts.Secret = []byte(secret)
	if opts.SMTPPassword, err = smtpPassword.resolve(log, n.smtpPassword, n.smtpPasswordFile); err != nil {
		return nil, err
	}
	if n.directory != "" {
		if opts.Directory, err = notify.LoadDirectory(n.directory); err != nil {
			return nil, usageErrorf("--approver-directory %v", err)
		}
	}
	if fs != nil {
		if f := fs.Lookup("notify"); f != nil && flagSource(f) == "command line" && slices.ContainsFunc(n.targets, func(t string) bool { return strings.HasPrefix(t, "slack:") }) {
			log.Warn("a slack:// --notify on the command line: its path is the webhook's key, and any local user can read it (/proc/PID/cmdline, ps); use FULFILLER_NOTIFY or the config file")
		}
	}
	var targets []notify.Target
	for _, raw := range n.targets {
		t, err := notify.ParseTarget(raw, opts)
		if err != nil {
			return nil, usageErrorf("--notify %v", err)
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// checkInboxURL refuses an inbox link that must not be mailed out: not
// http(s), with credentials, a query (approve --web's ?token= is a
// secret) or a fragment (the card's goes there).
func checkInboxURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return usageErrorf("--inbox-url: want https://host/path of the inbox page")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(raw, "?") || strings.HasSuffix(raw, "#") {
		return usageErrorf("--inbox-url %s://%s: no credentials, query or fragment: the link is mailed and posted to chat, and a token in it would go with it", u.Scheme, u.Host)
	}
	return nil
}

// flagSet is run's flags, nil when run is called without its command
// (tests).
func (fl *runFlags) flagSet() *pflag.FlagSet {
	if fl.cmd == nil {
		return nil
	}
	return fl.cmd.Flags()
}
