package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/internal/sidecar"
)

// opsFlags are the operations flags run and demo share: the decision log
// and the --http listener.
type opsFlags struct {
	decisionLog   string
	mask          []string
	http          string
	httpToken     string
	httpTokenFile string
	logSync       string
}

func (o *opsFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.decisionLog, "decision-log", "", "write a JSON line per decision and outcome to `PATH` (- for stdout); reopened on SIGHUP")
	f.StringVar(&o.logSync, "decision-log-sync", string(decisionlog.SyncAlways), "when decision log records reach the disk: always (each answer waits for its record's fsync; concurrent ones share it) or interval (every second: faster, a crash loses up to a second)")
	f.StringArrayVar(&o.mask, "mask", nil, "input `PATH` to erase from the decision log, e.g. params.arguments.password (repeatable)")
	f.StringVar(&o.http, "http", "", "serve /healthz, /readyz, /metrics and the operator API on `ADDR` (e.g. 127.0.0.1:9464)")
	f.StringVar(&o.httpToken, "http-token", "", "bearer token the operator API (/v1/) requires; without one /v1/ answers 401 (prefer FULFILLER_HTTP_TOKEN or --http-token-file; never logged)")
	f.StringVar(&o.httpTokenFile, "http-token-file", "", "read the operator API's bearer token from `FILE` (read once at start, trimmed; mode 0600)")
}

// prepare resolves the operator API's token and checks the --http address
// against it. config and check both go through here, so --check refuses
// exactly what run refuses.
func (o *opsFlags) prepare(log *slog.Logger) (token string, err error) {
	if err := o.validate(); err != nil {
		return "", err
	}
	token, err = httpToken.resolve(log, o.httpToken, o.httpTokenFile)
	if err != nil {
		return "", err
	}
	if o.http != "" && !isLoopback(o.http) {
		if token == "" {
			return "", usageErrorf("--http %s is reachable from other machines and no token guards the operator API: set --http-token-file or FULFILLER_HTTP_TOKEN, or bind 127.0.0.1", o.http)
		}
		if weak := tokenWeakness(token); weak != "" {
			return "", usageErrorf("--http %s is reachable from other machines and the operator API's token is too weak (%s): make one with `openssl rand -base64 32`", o.http, weak)
		}
	}
	return token, nil
}

// minTokenBits is the least strength an operator API token must have on
// an address other machines reach: 128 bits, what `openssl rand -base64
// 16` gives (docs suggest 32 bytes).
const minTokenBits = 128

// minTokenDistinct is the fewest distinct characters such a token may
// have: a long run of one or two characters is long, not strong.
const minTokenDistinct = 8

// tokenWeakness says why token is too weak to guard a listener others
// reach, or "" when it is not. Its strength is estimated as a random
// string's of its length over the character classes it uses (lower case
// 26, upper case 26, digits 10, anything else 33), which a word or a
// pattern only overstates: the bar is for a random token, as
// `openssl rand` makes.
func tokenWeakness(token string) string {
	var lower, upper, digit, other bool
	distinct := map[rune]bool{}
	n := 0
	for _, r := range token {
		n++
		distinct[r] = true
		switch {
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= '0' && r <= '9':
			digit = true
		default:
			other = true
		}
	}
	alphabet := 0
	for _, c := range []struct {
		used bool
		size int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if c.used {
			alphabet += c.size
		}
	}
	bits := float64(n) * math.Log2(float64(max(alphabet, 1)))
	if bits < minTokenBits {
		return fmt.Sprintf("about %.0f bits; want at least %d", bits, minTokenBits)
	}
	if len(distinct) < minTokenDistinct {
		return fmt.Sprintf("about %d distinct characters; want at least %d bits", len(distinct), minTokenBits)
	}
	return ""
}

// isLoopback reports whether a listen address binds loopback only. An
// empty host binds every interface; a host name other than localhost could
// resolve anywhere, so it does not count.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// check proves that start could open what the flags name, without
// starting or creating anything: the decision log must be appendable (see
// checkAppendable) and the address is bound and released at once.
func (o *opsFlags) check(log *slog.Logger) error {
	if _, err := o.prepare(log); err != nil {
		return err
	}
	if o.decisionLog != "" && o.decisionLog != "-" {
		if err := checkAppendable(o.decisionLog); err != nil {
			return decisionLogError(err)
		}
	}
	if o.http != "" {
		ln, err := net.Listen("tcp", o.http)
		if err != nil {
			return listenError(o.http, err)
		}
		_ = ln.Close()
	}
	return nil
}

// decisionLogError is how a decision log that cannot be opened stops
// fulfiller: a usage error naming the flag and the path once (decisionlog
// prefixes its errors with "decision log: ", which the flag says already).
func decisionLogError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "open" {
		return fileError("--decision-log", err)
	}
	return usageError(&wordedError{msg: "--decision-log " + strings.TrimPrefix(err.Error(), "decision log: "), cause: err})
}

// listenError is a usage error for an --http address that cannot be
// bound: the address and the system's reason ("address already in use"),
// without the system call's name.
func listenError(addr string, err error) error {
	msg := err.Error()
	var se *os.SyscallError
	var oe *net.OpError
	switch {
	case errors.As(err, &se):
		msg = se.Err.Error()
	case errors.As(err, &oe):
		msg = oe.Err.Error()
	}
	return usageError(&wordedError{msg: fmt.Sprintf("--http %s: %s", addr, msg), cause: err})
}

// checkAppendable proves path can be opened for appending as
// decisionlog.Open does, without writing or creating anything: an existing
// file is opened for append without O_CREATE and closed; a missing one
// needs a directory that takes new files. Errors read as opening path
// would.
func checkAppendable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := dirWritable(filepath.Dir(path)); err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return nil
}

// validate checks the flags the sidecar would refuse, so that run
// --check and run fail alike.
func (o *opsFlags) validate() error {
	if _, err := decisionlog.ParseSyncMode(o.logSync); err != nil {
		return usageErrorf("--decision-log-sync %v", err)
	}
	if o.http != "" {
		_, port, err := net.SplitHostPort(o.http)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || (port != "0" && n == 0) {
			return usageErrorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:9464 (0.0.0.0:9464 for every interface)", o.http)
		}
	}
	return nil
}

// config is the sidecar's operations surface as the flags give it,
// after the checks --check makes too (prepare): the token resolved, the
// address allowed.
func (o *opsFlags) config(log *slog.Logger) (sidecar.OpsConfig, error) {
	token, err := o.prepare(log)
	if err != nil {
		return sidecar.OpsConfig{}, err
	}
	syncMode, _ := decisionlog.ParseSyncMode(o.logSync) // checked by prepare
	if o.decisionLog == "" && len(o.mask) > 0 {
		log.Warn("--mask has no effect without --decision-log")
	}
	return sidecar.OpsConfig{DecisionLog: o.decisionLog, Mask: o.mask, Sync: syncMode, HTTP: o.http, HTTPToken: token}, nil
}
