// Package reloadfile keeps one file's parsed content in force while a
// process runs, as `fulfiller run` does for --tool-metadata and
// --approver-keys (the policies, a set of files and directories, have
// their own watch in package policies).
//
// A change is read and parsed whole; one that does not parse is refused:
// logged, counted, and the last good content stays in force. Readers take
// the content in force with Current, an immutable value swapped
// atomically on each reload, so that no reader sees half of two files.
package reloadfile

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce is how long Watch waits for a burst of file events (an
// editor's write-rename-chmod, a ConfigMap's symlink swap) to end before
// it reloads once.
const debounce = 100 * time.Millisecond

// Messages are the log lines of one kind of file, which operators search
// for (docs/operations.md names them).
type Messages struct {
	Failed     string // a change refused; the last good content stays
	Reloaded   string // a change in force
	ValidAgain string // a refused file parses again, unchanged from the content in force
	WatchError string // fsnotify reported an error
	Watch      string // what Watch's error says it could not do, e.g. "watch tool metadata"
}

// Options configure a File.
type Options[T any] struct {
	// Read reads and parses the file at path. Its error names the file
	// (and the line, where one is wrong): it is what the operator sees.
	// raw is what was parsed: a reload of the same bytes changes nothing.
	Read func(path string) (raw []byte, v T, err error)
	// Attrs are logged with Messages.Reloaded: counts, never content (a
	// file may hold keys).
	Attrs    func(v T) []any
	Messages Messages
	Logger   *slog.Logger // nil: discard
	// RefusedLevel is the level Messages.Failed is logged at; nil:
	// slog.LevelError.
	RefusedLevel slog.Leveler
	// Check, when set, is asked about every change that parses before it
	// is put in force, with the content in force and the new one: an
	// error refuses the change as a parse error does (logged, counted,
	// the last good content stays). It is how a file refuses a change
	// that parses but is not what anyone meant, such as a truncated write.
	Check func(inForce, next T) error
	// Warn, when set, is asked about every change put in force: a
	// message it returns is logged at WARN (with the file) after
	// Messages.Reloaded, for a change that parses and was meant but that
	// an operator must not miss.
	Warn func(inForce, next T) string
	// OnReload, when set, is told the outcome of every reload Watch
	// makes: nil when the file's content is in force, else why it was
	// refused.
	OnReload func(error)
	// Watching, when set, is called once Watch watches the file: a
	// change made from then on is seen.
	Watching func()
}

// File holds the content in force for one file.
type File[T any] struct {
	path string
	opts Options[T]

	// cur is never mutated once stored: a reload stores a new value.
	cur      atomic.Pointer[T]
	failures atomic.Uint64 // refused reloads, ever

	mu      sync.Mutex
	lastRaw []byte // the bytes of the content in force
	lastErr error  // the last refused reload; nil once one succeeds
}

// Open reads the file at path; its error means there is no content to
// start with.
func Open[T any](path string, opts Options[T]) (*File[T], error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	raw, v, err := opts.Read(path)
	if err != nil {
		return nil, err
	}
	f := &File[T]{path: path, opts: opts, lastRaw: raw}
	f.cur.Store(&v)
	return f, nil
}

// Path is the file the content comes from.
func (f *File[T]) Path() string { return f.path }

// Current is the content in force now.
func (f *File[T]) Current() T { return *f.cur.Load() }

// LastReloadError is the last refused change, or nil when the file's
// current content is in force.
func (f *File[T]) LastReloadError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastErr
}

// Failures counts the refused changes since Open.
func (f *File[T]) Failures() uint64 { return f.failures.Load() }

// Reload reads the file again. A file that no longer parses (or is gone)
// is refused: the error is returned and logged, and the last good
// content stays in force.
func (f *File[T]) Reload() error {
	raw, v, err := f.opts.Read(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	log := f.opts.Logger
	inForce := *f.cur.Load()
	if err == nil && f.opts.Check != nil && !bytes.Equal(raw, f.lastRaw) {
		err = f.opts.Check(inForce, v)
	}
	if err != nil {
		f.lastErr = err
		f.failures.Add(1)
		var level slog.Level = slog.LevelError
		if f.opts.RefusedLevel != nil {
			level = f.opts.RefusedLevel.Level()
		}
		log.Log(context.Background(), level, f.opts.Messages.Failed, "file", f.path, "err", err)
		return err
	}
	recovered := f.lastErr != nil
	f.lastErr = nil
	if bytes.Equal(raw, f.lastRaw) {
		if recovered {
			log.Info(f.opts.Messages.ValidAgain, "file", f.path)
		}
		return nil // a touch, a chmod: nothing changed
	}
	f.cur.Store(&v)
	f.lastRaw = raw
	attrs := []any{"file", f.path}
	if f.opts.Attrs != nil {
		attrs = append(attrs, f.opts.Attrs(v)...)
	}
	log.Info(f.opts.Messages.Reloaded, attrs...)
	if f.opts.Warn != nil {
		if msg := f.opts.Warn(inForce, v); msg != "" {
			log.Warn(msg, "file", f.path)
		}
	}
	return nil
}

// Watch reloads the file whenever it changes, until ctx is done; then it
// returns nil. It returns an error only when watching cannot start.
//
// The file is watched through its directory: editors, the team inbox
// (which writes its passkeys file and renames it into place) and
// Kubernetes ConfigMaps replace a file by renaming, which ends a watch on
// the file itself (a ConfigMap's swap shows as events on its ..data link).
func (f *File[T]) Watch(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.opts.Messages.Watch, f.path, err)
	}
	defer fw.Close()
	abs, err := filepath.Abs(f.path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.opts.Messages.Watch, f.path, err)
	}
	if err := fw.Add(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("%s %s: %w", f.opts.Messages.Watch, f.path, err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	if f.opts.Watching != nil {
		f.opts.Watching()
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
			timer.Reset(debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			f.opts.Logger.Warn(f.opts.Messages.WatchError, "file", f.path, "err", err)
		case <-timer.C:
			err := f.Reload() // logged by Reload
			if f.opts.OnReload != nil {
				f.opts.OnReload(err)
			}
		}
	}
}
