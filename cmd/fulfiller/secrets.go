package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// secretFlag is a flag that carries a secret, with its file twin: the
// secret may come from the flag (better: its FULFILLER_* variable) or from
// a file read once at start.
type secretFlag struct {
	flag, fileFlag string
}

var (
	joinToken = secretFlag{flag: "token", fileFlag: "token-file"}
	httpToken = secretFlag{flag: "http-token", fileFlag: "http-token-file"}
)

// errNoToken stops run (and --check) without a participant token: the
// reference gateway still joins a participant without one, with its
// default capabilities, which cannot send a reject or a fulfilment, so
// such a run would never become ready.
var errNoToken = usageErrorf("no participant token: set FULFILLER_TOKEN or --token-file (without one the gateway grants only its default capabilities, which cannot answer a proposal)")

// resolve returns the secret: value (what the flag holds) or the contents
// of file, trimmed. Both at once is a usage error, as is a file that
// cannot be read or holds nothing. A file that group or others may read
// gets a warning, as ssh gives for a private key; it still works, since a
// mounted secret's mode is not always ours to choose.
func (s secretFlag) resolve(log *slog.Logger, value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", usageErrorf("--%s and --%s (or %s) are both set: give one", s.fileFlag, s.flag, envName(s.flag))
	}
	fi, err := os.Stat(file)
	if err != nil {
		return "", fileError("--"+s.fileFlag, err)
	}
	if !fi.Mode().IsRegular() {
		return "", usageErrorf("--%s %s: not a regular file", s.fileFlag, file)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fileError("--"+s.fileFlag, err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return "", usageErrorf("--%s %s: the file is empty", s.fileFlag, file)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", usageErrorf("--%s %s: more than one line; the file must hold just the token", s.fileFlag, file)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		log.Warn(fmt.Sprintf("--%s %s is readable by group or others (mode %#o): chmod 600 it", s.fileFlag, file, perm))
	}
	return token, nil
}

// warnConfig logs what an operator should fix in how cmd was configured,
// without ever logging a value: secrets on the command line (any local
// user reads them in /proc/PID/cmdline or ps) or in the config file, and
// FULFILLER_* variables that set nothing.
func warnConfig(log *slog.Logger, cmd *cobra.Command, secrets ...secretFlag) {
	for _, s := range secrets {
		f := cmd.Flags().Lookup(s.flag)
		if f == nil {
			continue
		}
		switch flagSource(f) {
		case "command line":
			log.Warn(fmt.Sprintf("--%s on the command line: any local user can read it (/proc/PID/cmdline, ps); use %s or --%s", s.flag, envName(s.flag), s.fileFlag))
		case sourceConfig:
			log.Warn(fmt.Sprintf("the config file sets %s: whoever can read the file has it; use %s or --%s", s.flag, envName(s.flag), s.fileFlag))
		}
	}
	for _, name := range unknownEnv(cmd.Root(), os.Environ()) {
		log.Warn(fmt.Sprintf("%s sets no flag and is ignored (misspelt?)", name))
	}
}
