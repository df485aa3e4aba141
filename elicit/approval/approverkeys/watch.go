// Package approverkeys provides the approver keys in force for a running
// fulfiller (--approver-keys): the file's keys, reloaded whenever the file
// changes, so that an approver enrolled (or re-enrolled after losing a
// device) counts without a restart.
//
// A change that does not parse is refused: it is logged at WARN, counted,
// and the last good keys stay in force. So is, while keys are in force, a
// file that keys nobody without saying so (empty, or comments only): that
// is what a writer that truncates the file and writes it back leaves in
// between, and taking it would turn signed approvals off for a forger's
// benefit. Removing every key is an explicit act: a file whose only line
// is `none` (approval.NoKeysLine), logged at WARN. Readers take the current set with Keys,
// an immutable value swapped atomically on each reload: an answer is
// verified under one set, never under half of two.
//
// A file that does not exist yet, in a directory that does, is no
// approver enrolled yet: the team inbox (`fulfiller inbox serve`) makes
// its passkeys file at its first start, and the fulfiller may start
// first. The watcher starts with no keys, says so at WARN, and reads the
// file when it appears. Once a file has been read, its going away is a
// refused change like any other.
package approverkeys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/reloadfile"
)

// Options configure a Watcher.
type Options struct {
	Logger *slog.Logger // nil: discard
	// OnReload, when set, is told the outcome of every reload Watch
	// makes: nil when the file's content is in force, else why it was
	// refused (the last good keys stay in force). The operations
	// surface counts the refusals with it.
	OnReload func(error)
	// Watching, when set, is called once Watch watches the file: a
	// change made from then on is seen.
	Watching func()
}

// Watcher holds the approver keys in force for one file and reloads them
// when the file changes. A nil *Watcher holds no keys: every approver's
// answers are taken on the gateway's word.
type Watcher struct {
	file *reloadfile.File[approval.ApproverKeys]
}

// Open loads the file at path; an error (naming the file, and the line
// when one is wrong) means there are no keys to start with. A file that
// does not exist in a directory that does is no approver enrolled yet
// (logged at WARN): no keys, until the file appears.
func Open(path string, opts Options) (*Watcher, error) {
	// absent stays true until the file has been read once: until then a
	// missing file is what it was at start, no approver enrolled yet.
	var absent atomic.Bool
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if fi, derr := os.Stat(filepath.Dir(path)); derr == nil && fi.IsDir() {
			absent.Store(true)
		}
	}
	readOrAbsent := func(path string) ([]byte, approval.ApproverKeys, error) {
		raw, keys, err := read(path)
		if errors.Is(err, fs.ErrNotExist) && absent.Load() {
			return nil, approval.ApproverKeys{}, nil
		}
		if err == nil {
			absent.Store(false)
		}
		return raw, keys, err
	}
	f, err := reloadfile.Open(path, reloadfile.Options[approval.ApproverKeys]{
		Read: readOrAbsent,
		// How many approvers are keyed, of each kind; never a key.
		Attrs: func(k approval.ApproverKeys) []any {
			return []any{"approvers", len(k.IDs()), "ed25519", len(k.Ed25519), "passkeys", len(k.Passkeys)}
		},
		Messages: reloadfile.Messages{
			Failed:     "approver keys reload failed; the last good keys stay in force",
			Reloaded:   "approver keys reloaded",
			ValidAgain: "approver keys file is valid again; unchanged from the keys in force",
			WatchError: "approver keys watch error",
			Watch:      "watch approver keys",
		},
		RefusedLevel: slog.LevelWarn,
		Check: func(inForce, next approval.ApproverKeys) error {
			if err := check(inForce, next); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			return nil
		},
		Warn: func(inForce, next approval.ApproverKeys) string {
			if len(next.IDs()) == 0 && len(inForce.IDs()) > 0 {
				return "approver keys removed: every approver's answers are taken on the gateway's word"
			}
			return ""
		},
		Logger: opts.Logger, OnReload: opts.OnReload, Watching: opts.Watching,
	})
	if err != nil {
		return nil, err
	}
	if absent.Load() && opts.Logger != nil {
		opts.Logger.Warn(MsgAbsent, "file", path)
	}
	return &Watcher{file: f}, nil
}

// MsgAbsent is logged at WARN when Open finds no file: nobody is keyed
// until it appears (docs/operations.md, "Pinning").
const MsgAbsent = "approver keys file does not exist yet: no approver has enrolled, so every approver's answers are taken on the gateway's word until it appears; it is read as soon as it does"

// check refuses a change that keys nobody without saying so while keys
// are in force.
func check(inForce, next approval.ApproverKeys) error {
	if len(next.IDs()) == 0 && !next.None && len(inForce.IDs()) > 0 {
		return ErrNoKeys
	}
	return nil
}

// ErrNoKeys is why a change that keys nobody without saying so was
// refused (wrapped with the file's name).
var ErrNoKeys = errors.New("no approver keys: an empty file (or one of comments only) is refused while keys are in force; write `" + approval.NoKeysLine + "` to remove every key")

// read reads the file once, so that the bytes compared on the next reload
// are the bytes parsed.
func read(path string) ([]byte, approval.ApproverKeys, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, approval.ApproverKeys{}, err
	}
	keys, err := approval.ParseApproverKeys(bytes.NewReader(raw))
	if err != nil {
		var ke *approval.KeyFileError
		if errors.As(err, &ke) {
			ke.File = path // as approval.LoadApproverKeys names it
		}
		return nil, approval.ApproverKeys{}, err
	}
	return raw, keys, nil
}

// Path is the file the keys come from.
func (w *Watcher) Path() string { return w.file.Path() }

// Keys is the set in force now. The value is shared: callers must not
// modify its maps.
func (w *Watcher) Keys() approval.ApproverKeys {
	if w == nil {
		return approval.ApproverKeys{}
	}
	return w.file.Current()
}

// Has says whether the approver's answers must be signed under the keys
// in force now (decisionlog.Options.Keyed).
func (w *Watcher) Has(approver string) bool { return w.Keys().Has(approver) }

// LastReloadError is the last refused change, or nil when the file's
// current content is in force.
func (w *Watcher) LastReloadError() error {
	if w == nil {
		return nil
	}
	return w.file.LastReloadError()
}

// ReloadFailures counts the refused changes since Open (the operations
// surface's fulfiller_approver_keys_reload_failures_total).
func (w *Watcher) ReloadFailures() uint64 {
	if w == nil {
		return 0
	}
	return w.file.Failures()
}

// Reload reads the file again. A file that no longer parses (or is gone)
// is refused: the error is returned and logged, and the last good keys
// stay in force.
func (w *Watcher) Reload() error { return w.file.Reload() }

// Watch reloads the file whenever it changes, until ctx is done; then it
// returns nil. It returns an error only when watching cannot start. See
// reloadfile.File.Watch.
func (w *Watcher) Watch(ctx context.Context) error { return w.file.Watch(ctx) }
