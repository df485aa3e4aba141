package toolmeta

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// watchDebounce is how long Watch waits for a burst of file events (an
// editor's write-rename-chmod) to end before it reloads once.
const watchDebounce = 100 * time.Millisecond

// Options configure a Watcher.
type Options struct {
	Logger *slog.Logger // nil: discard
	// OnReload, when set, is told the outcome of every reload Watch
	// makes: nil when the file's new content is in force, else why it was
	// refused (the last good metadata stays in force).
	OnReload func(error)
	// Watching, when set, is called once Watch watches the file: a
	// change made from then on is seen.
	Watching func()
}

// Watcher holds the metadata in force for one file and reloads it when
// the file changes, like the policies: a change that does not validate is
// refused, logged, and the last good metadata keeps applying. A nil
// *Watcher declares nothing.
type Watcher struct {
	path     string
	log      *slog.Logger
	onReload func(error)
	watching func()

	cur atomic.Pointer[Metadata]

	mu      sync.Mutex
	lastRaw []byte // the text of the metadata in force
	lastErr error  // the last refused reload; nil once one succeeds
}

// Open loads the file at path; an error (naming the file, line and key)
// means there is no metadata to start with.
func Open(path string, opts Options) (*Watcher, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{path: path, log: opts.Logger, onReload: opts.OnReload, watching: opts.Watching}
	raw, m, err := read(path)
	if err != nil {
		return nil, err
	}
	w.cur.Store(m)
	w.lastRaw = raw
	return w, nil
}

func read(path string) ([]byte, *Metadata, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		return nil, nil, &Error{File: path, Msg: msg, Err: err}
	}
	m, err := Parse(path, raw)
	if err != nil {
		return nil, nil, err
	}
	return raw, m, nil
}

// Metadata is the metadata in force.
func (w *Watcher) Metadata() *Metadata {
	if w == nil {
		return nil
	}
	return w.cur.Load()
}

// Annotate is Metadata().Annotate: the annotations a policy sees for a
// tool, with the entry that applied.
func (w *Watcher) Annotate(server, tool string, owner json.RawMessage) (json.RawMessage, *Entry) {
	return w.Metadata().Annotate(server, tool, owner)
}

// LastReloadError is the last refused change, or nil when the file's
// current content is in force.
func (w *Watcher) LastReloadError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Reload reads the file again. A file that no longer validates (or is
// gone) is refused: the error is returned and logged, and the last good
// metadata stays in force.
func (w *Watcher) Reload() error {
	raw, m, err := read(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		w.log.Error("tool metadata reload failed; the last good metadata stays in force", "file", w.path, "err", err)
		return err
	}
	recovered := w.lastErr != nil
	w.lastErr = nil
	if bytes.Equal(raw, w.lastRaw) {
		if recovered {
			w.log.Info("tool metadata file is valid again; unchanged from the metadata in force", "file", w.path)
		}
		return nil // a touch, a chmod: nothing changed
	}
	w.cur.Store(m)
	w.lastRaw = raw
	w.log.Info("tool metadata reloaded", "file", w.path, "entries", m.Len())
	return nil
}

// Watch reloads the file whenever it changes, until ctx is done; then it
// returns nil. It returns an error only when watching cannot start.
//
// The file is watched through its directory: editors and Kubernetes
// ConfigMaps replace a file by renaming, which ends a watch on the file
// itself (a ConfigMap's swap shows as events on its ..data link).
func (w *Watcher) Watch(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch tool metadata %s: %w", w.path, err)
	}
	defer fw.Close()
	abs, err := filepath.Abs(w.path)
	if err != nil {
		return fmt.Errorf("watch tool metadata %s: %w", w.path, err)
	}
	dir := filepath.Dir(abs)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("watch tool metadata %s: %w", w.path, err)
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
			w.log.Warn("tool metadata watch error", "file", w.path, "err", err)
		case <-timer.C:
			err := w.Reload() // logged by Reload
			if w.onReload != nil {
				w.onReload(err)
			}
		}
	}
}
