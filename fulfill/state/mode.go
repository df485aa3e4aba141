package state

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Kind says where a Store keeps its buckets.
type Kind int

const (
	// Memory is an embedded server with JetStream memory storage: nothing
	// persists.
	Memory Kind = iota + 1
	// Dir is an embedded server with a file store in a directory, synced
	// before what docs/design.md requires on disk (see groupSync).
	Dir
	// External is a NATS cluster reached over the network.
	External
	// SharedDir is a directory several processes on one machine share
	// (fulfiller mcp, which a client starts once per session): one of
	// them hosts an embedded server on loopback for all, and another
	// takes over when it ends (share.go). ParseMode never returns it; a
	// command that runs many processes on one --state turns Dir into it.
	SharedDir
)

// Mode is a parsed --state value.
type Mode struct {
	Kind Kind
	Dir  string   // Kind == Dir or SharedDir: the directory
	URLs []string // Kind == External: server URLs, nats:// or tls://
}

// String returns the mode as it would be given on the command line.
func (m Mode) String() string {
	switch m.Kind {
	case Memory:
		return "memory"
	case Dir, SharedDir:
		return m.Dir
	case External:
		return strings.Join(m.URLs, ",")
	}
	return "invalid"
}

// ParseMode parses a --state value: "memory", a directory path, or a
// comma-separated list of nats:// or tls:// URLs. Credentials in a URL are
// refused: they would show in process listings and logs, so they come only
// from a creds file (Config.Creds). A directory literally named "memory"
// must be written "./memory".
func ParseMode(s string) (Mode, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Mode{}, errors.New("empty; want memory, a directory, or nats://host:port")
	case s == "memory":
		return Mode{Kind: Memory}, nil
	case strings.Contains(s, "://"):
		var urls []string
		for _, part := range strings.Split(s, ",") {
			u, err := parseURL(strings.TrimSpace(part))
			if err != nil {
				return Mode{}, err
			}
			urls = append(urls, u)
		}
		return Mode{Kind: External, URLs: urls}, nil
	}
	return Mode{Kind: Dir, Dir: filepath.Clean(s)}, nil
}

func parseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("bad URL %q: %w", s, err)
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return "", fmt.Errorf("URL %q: scheme must be nats:// or tls://", s)
	}
	if u.User != nil {
		// Do not echo the URL: it holds a secret.
		return "", fmt.Errorf("URL for host %q carries credentials; use --state-creds FILE instead", u.Hostname())
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("URL %q has no host", s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("URL %q: only scheme://host[:port] is accepted", s)
	}
	return u.Scheme + "://" + u.Host, nil
}
