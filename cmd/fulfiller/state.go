package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/fulfill/state"
)

// stateFlags are run's state store flags (docs/design.md "Durable and shared
// pending work"; docs/state.md).
type stateFlags struct {
	spec    string
	creds   string
	lease   time.Duration
	seenTTL time.Duration
}

// defaultStateDir is where run keeps pending work when --state is not given.
const defaultStateDir = "fulfiller.state"

func (s *stateFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.spec, "state", defaultStateDir, "where pending work lives: a `DIR` (embedded store, created 0700, synced to disk), nats://host:4222[,nats://…] or tls://… (an external NATS JetStream cluster, shared by a group of fulfillers), or memory (nothing survives the process)")
	f.StringVar(&s.creds, "state-creds", "", "NATS credentials `FILE` for a nats:// or tls:// --state (credentials are never accepted in the URL)")
	f.DurationVar(&s.lease, "lease", state.DefaultLease, "how long this member's lease in the store lives without renewal (renewed every third of it); peers adopt the work of a member whose lease lapsed (at least 1s)")
	f.DurationVar(&s.seenTTL, "seen-ttl", state.DefaultSeenTTL, "how long a proposal id stays seen: a replay within this window runs nothing (at least 1s)")
}

// mode parses --state and checks the flags that go with it, as run and
// --check both do. Errors are usage errors naming the flag; a URL with
// credentials is refused without echoing them (state.ParseMode).
func (s *stateFlags) mode() (state.Mode, error) {
	m, err := state.ParseMode(s.spec)
	if err != nil {
		return state.Mode{}, usageErrorf("--state %v", err)
	}
	if s.lease < time.Second {
		return state.Mode{}, usageErrorf("--lease %s: must be at least 1s", s.lease)
	}
	if s.seenTTL < time.Second {
		return state.Mode{}, usageErrorf("--seen-ttl %s: must be at least 1s", s.seenTTL)
	}
	if s.creds != "" && m.Kind != state.External {
		return state.Mode{}, usageErrorf("--state-creds is only for a nats:// or tls:// --state, not %s", m)
	}
	return m, nil
}

// check proves that open could use the flags, leaving nothing behind and
// starting nothing: a DIR is tried as run will use it (checkStateDir);
// a creds file must be a
// readable regular file (with a warning when group or others may read it:
// it holds a private key seed). An external store is not contacted.
func (s *stateFlags) check(log *slog.Logger) (state.Mode, error) {
	m, err := s.mode()
	if err != nil {
		return state.Mode{}, err
	}
	switch m.Kind {
	case state.Dir:
		if err := checkStateDir(m.Dir); err != nil {
			return state.Mode{}, fileError("--state", err)
		}
	case state.External:
		if s.creds != "" {
			if err := checkCredsFile(s.creds, log); err != nil {
				return state.Mode{}, err
			}
		}
	}
	return m, nil
}

// checkCredsFile checks that --state-creds names a readable regular
// file, warning when group or others may read it: it holds a private
// key seed. run's --check and fulfiller mcp both check it this way.
func checkCredsFile(path string, log *slog.Logger) error {
	f, err := os.Open(path)
	if err != nil {
		return fileError("--state-creds", err)
	}
	fi, err := f.Stat()
	_ = f.Close()
	switch {
	case err != nil:
		return fileError("--state-creds", err)
	case !fi.Mode().IsRegular():
		return usageErrorf("--state-creds %s: not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		log.Warn(fmt.Sprintf("--state-creds %s is readable by group or others (mode %#o): chmod 600 it", path, fi.Mode().Perm()))
	}
	return nil
}

// checkStateDir tries what run will do with dir, so that --check fails
// exactly when run's store would: an existing directory must take a new
// file (one is created and removed), a missing one is created as run
// creates it (MkdirAll, 0700) and removed again with every parent it
// made. Asking access(2) instead said yes to root for /proc/x, which no
// one can create. A relative dir's error names its absolute path too: the
// working directory of a service is not always the one you think.
func checkStateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s: not a directory", dir)
	case err == nil:
		f, err := os.CreateTemp(abs, ".fulfiller-check-*")
		if err != nil {
			return stateDirError(dir, abs, "write", err)
		}
		name := f.Name()
		_ = f.Close()
		if err := os.Remove(name); err != nil {
			return stateDirError(dir, abs, "write", err)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return stateDirError(dir, abs, "stat", err)
	}
	// The nearest existing ancestor: what MkdirAll starts from, and where
	// the removal stops.
	parent := filepath.Dir(abs)
	for {
		fi, err := os.Stat(parent)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s: %s is not a directory", dir, parent)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || parent == filepath.Dir(parent) {
			return stateDirError(dir, abs, "mkdir", err)
		}
		parent = filepath.Dir(parent)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return stateDirError(dir, abs, "mkdir", err)
	}
	for d := abs; d != parent; d = filepath.Dir(d) {
		if err := os.Remove(d); err != nil {
			return stateDirError(dir, d, "remove what --check made", err)
		}
	}
	return nil
}

// stateDirError is why dir (abs, absolute) cannot be the state
// directory: the operation and the system's reason, and for a relative
// dir the absolute path it means.
func stateDirError(dir, abs, op string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if filepath.IsAbs(dir) && abs == filepath.Clean(dir) {
		return &fs.PathError{Op: op, Path: dir, Err: err}
	}
	return fmt.Errorf("%s: %s %s: %w", dir, op, abs, err)
}
