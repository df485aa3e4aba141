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

// check proves that open could use the flags, without creating or
// starting anything: a DIR must be a directory that can be written, or be
// creatable under the nearest existing parent; a creds file must be a
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
			f, err := os.Open(s.creds)
			if err != nil {
				return state.Mode{}, fileError("--state-creds", err)
			}
			fi, err := f.Stat()
			_ = f.Close()
			switch {
			case err != nil:
				return state.Mode{}, fileError("--state-creds", err)
			case !fi.Mode().IsRegular():
				return state.Mode{}, usageErrorf("--state-creds %s: not a regular file", s.creds)
			case fi.Mode().Perm()&0o077 != 0:
				log.Warn(fmt.Sprintf("--state-creds %s is readable by group or others (mode %#o): chmod 600 it", s.creds, fi.Mode().Perm()))
			}
		}
	}
	return m, nil
}

// checkStateDir reports why dir could not serve as a state directory.
func checkStateDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s: not a directory", dir)
	case err == nil:
		if err := dirWritable(dir); err != nil {
			return &fs.PathError{Op: "write", Path: dir, Err: err}
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// Created with MkdirAll: the nearest existing ancestor must take it.
	parent := filepath.Dir(dir)
	for {
		fi, err := os.Stat(parent)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: dir, Err: fmt.Errorf("%s is not a directory", parent)}
			}
			if err := dirWritable(parent); err != nil {
				return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || parent == filepath.Dir(parent) {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
		}
		parent = filepath.Dir(parent)
	}
}
