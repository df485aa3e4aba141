// Package approverkeys provides the approver keys in force for a running
// fulfiller (--approver-keys): the file's keys, reloaded whenever the file
// changes, so that an approver enrolled (or re-enrolled after losing a
// device) counts without a restart.
//
// A change that does not parse is refused: it is logged, counted, and the
// last good keys stay in force. Readers take the current set with Keys,
// an immutable value swapped atomically on each reload: an answer is
// verified under one set, never under half of two.
package approverkeys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/mewkit/fulfiller/approval"
)

// watchDebounce is how long Watch waits for a burst of file events (an
// editor's write-rename-chmod, a ConfigMap's symlink swap) to end before
// it reloads once.
const watchDebounce = 100 * time.Millisecond

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
	path     string
	log      *slog.Logger
	onReload func(error)
	watching func()

	// cur is never mutated once stored: a reload stores a new set.
	cur atomic.Pointer[approval.ApproverKeys]

	failures atomic.Uint64 // refused reloads, ever

	mu      sync.Mutex
	lastRaw []byte // the text of the keys in force
	lastErr error  // the last refused reload; nil once one succeeds
}

// Open loads the file at path; an error (naming the file, and the line
// when one is wrong) means there are no keys to start with.
func Open(path string, opts Options) (*Watcher, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	raw, keys, err := read(path)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, log: opts.Logger, onReload: opts.OnReload, watching: opts.Watching, lastRaw: raw}
	w.cur.Store(&keys)
	return w, nil
}

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
func (w *Watcher) Path() string { return w.path }

// Keys is the set in force now. The value is shared: callers must not
// modify its maps.
func (w *Watcher) Keys() approval.ApproverKeys {
	if w == nil {
		return approval.ApproverKeys{}
	}
	return *w.cur.Load()
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
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// ReloadFailures counts the refused changes since Open (the operations
// surface's fulfiller_approver_keys_reload_failures_total).
func (w *Watcher) ReloadFailures() uint64 {
	if w == nil {
		return 0
	}
	return w.failures.Load()
}

// Reload reads the file again. A file that no longer parses (or is gone)
// is refused: the error is returned and logged, and the last good keys
// stay in force. A successful reload logs how many approvers are keyed,
// of each kind; never a key.
func (w *Watcher) Reload() error {
	raw, keys, err := read(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		w.failures.Add(1)
		w.log.Error("approver keys reload failed; the last good keys stay in force", "file", w.path, "err", err)
		return err
	}
	recovered := w.lastErr != nil
	w.lastErr = nil
	if bytes.Equal(raw, w.lastRaw) {
		if recovered {
			w.log.Info("approver keys file is valid again; unchanged from the keys in force", "file", w.path)
		}
		return nil // a touch, a chmod: nothing changed
	}
	w.cur.Store(&keys)
	w.lastRaw = raw
	w.log.Info("approver keys reloaded", "file", w.path, "approvers", len(keys.IDs()), "ed25519", len(keys.Ed25519), "passkeys", len(keys.Passkeys))
	return nil
}

// Watch reloads the file whenever it changes, until ctx is done; then it
// returns nil. It returns an error only when watching cannot start.
//
// The file is watched through its directory: editors, the team inbox
// (which writes its passkeys file and renames it into place) and
// Kubernetes ConfigMaps replace a file by renaming, which ends a watch on
// the file itself (a ConfigMap's swap shows as events on its ..data link).
func (w *Watcher) Watch(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch approver keys %s: %w", w.path, err)
	}
	defer fw.Close()
	abs, err := filepath.Abs(w.path)
	if err != nil {
		return fmt.Errorf("watch approver keys %s: %w", w.path, err)
	}
	if err := fw.Add(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("watch approver keys %s: %w", w.path, err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	if w.watching != nil {
		w.watching()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			name := ev.Name
			if a, err := filepath.Abs(name); err == nil {
				name = a
			}
			if name != abs && !strings.HasPrefix(filepath.Base(name), "..") {
				continue
			}
			timer.Reset(watchDebounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.log.Warn("approver keys watch error", "file", w.path, "err", err)
		case <-timer.C:
			err := w.Reload() // logged by Reload
			if w.onReload != nil {
				w.onReload(err)
			}
		}
	}
}
