package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/grantstore"
	"github.com/mewkit/fulfiller/internal/outbox"
	"github.com/mewkit/fulfiller/ops"
	"github.com/mewkit/fulfiller/state"
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

// storeConfig is what open passes to state.Open besides the flags.
type storeConfig struct {
	member, space string
	maxPending    int
	observer      state.Observer
}

// open opens the store the flags name and starts this member's lease.
// --state memory is the same embedded JetStream store with memory storage
// (docs/design.md: the store fulfiller uses in every mode), so claims, records and
// the operator API behave as in the other modes; nothing survives the
// process, and run says so. ctx bounds the opening only: the
// lease is renewed until Close, which removes it, so that a graceful
// shutdown still holds its work while it answers it.
func (s *stateFlags) open(ctx context.Context, log *slog.Logger, cfg storeConfig) (*state.Store, error) {
	m, err := s.check(log)
	if err != nil {
		return nil, err
	}
	if m.Kind == state.Memory {
		log.Warn("--state memory: pending work (open prompts, fulfilments in flight, queued answers) dies with this process, and no other fulfiller can share it")
	}
	store, err := state.Open(ctx, state.Config{
		Mode: m, Creds: s.creds, Space: cfg.space, Member: cfg.member,
		MaxPending: cfg.maxPending, Lease: s.lease, SeenTTL: s.seenTTL,
		Observer: cfg.observer, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("--state %s: %w", m, err)
	}
	if err := store.StartLease(context.WithoutCancel(ctx)); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("--state %s: %w", m, err)
	}
	log.Info("state store open", "state", m.String(), "member", cfg.member, "lease", s.lease, "seen_ttl", s.seenTTL)
	return store, nil
}

// closeStore closes the store after the fulfiller and the client have
// stopped: the lease is removed, so peers adopt anything left at once.
func closeStore(log *slog.Logger, store *state.Store) {
	if store == nil {
		return
	}
	if err := store.Close(); err != nil {
		log.Error("state store close", "err", err)
	}
}

// fulfillStore is store as fulfill.Config.Store: nil (in-process only)
// for --state memory, never a typed nil.
func fulfillStore(store *state.Store) fulfill.Store {
	if store == nil {
		return nil
	}
	return store
}

// grantStore is the store grants are kept in: the pending-work store, or
// none (memory only, for this process) with --state memory.
func grantStore(store *state.Store) grantstore.Store {
	if store == nil {
		return nil
	}
	return store
}

// probeStore makes the store's health known to /readyz and the metrics,
// probed in the background; stop ends the probe (before the store closes).
func probeStore(src *ops.Source, store *state.Store, name string) (stop func()) {
	if store == nil {
		return func() {}
	}
	probe := ops.NewStoreProbe(name, store, 0)
	src.SetStore(probe)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); probe.Run(ctx) }()
	return func() { cancel(); <-done }
}

// rpcIDSource is agent.Config.RPCIDs for store: ids unique across the
// group and restarts (rule 11); nil, the in-process counter, for --state
// memory.
func rpcIDSource(store *state.Store) func(context.Context) (int64, error) {
	if store == nil {
		return nil
	}
	return store.NextRPCID
}

// restoreOutbox is agent.Config.Outbox for store: answers queued while the
// gateway was unreachable are kept in the store, and those an earlier
// process left there are sent on the first session while their proposal
// may still wait (maxAge: --pending-ttl). nil (the in-memory outbox) for
// --state memory.
func restoreOutbox(ctx context.Context, log *slog.Logger, store *state.Store, maxAge time.Duration) (agent.Outbox, error) {
	if store == nil {
		return nil, nil
	}
	d := outbox.New(store, agent.DefaultOutboxSize, log)
	if _, _, err := d.Restore(ctx, maxAge); err != nil {
		return nil, err
	}
	return d, nil
}
