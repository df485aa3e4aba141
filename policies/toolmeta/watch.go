package toolmeta

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"

	"github.com/mewkit/fulfiller/internal/reloadfile"
)

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
	file *reloadfile.File[*Metadata]
}

// Open loads the file at path; an error (naming the file, line and key)
// means there is no metadata to start with.
func Open(path string, opts Options) (*Watcher, error) {
	f, err := reloadfile.Open(path, reloadfile.Options[*Metadata]{
		Read:  read,
		Attrs: func(m *Metadata) []any { return []any{"entries", m.Len()} },
		Messages: reloadfile.Messages{
			Failed:     "tool metadata reload failed; the last good metadata stays in force",
			Reloaded:   "tool metadata reloaded",
			ValidAgain: "tool metadata file is valid again; unchanged from the metadata in force",
			WatchError: "tool metadata watch error",
			Watch:      "watch tool metadata",
		},
		Logger: opts.Logger, OnReload: opts.OnReload, Watching: opts.Watching,
	})
	if err != nil {
		return nil, err
	}
	return &Watcher{file: f}, nil
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
	return w.file.Current()
}

// Annotate is Metadata().Annotate: the annotations a policy sees for a
// tool, with the entry that applied.
func (w *Watcher) Annotate(server, tool string, owner json.RawMessage) (json.RawMessage, *Entry) {
	return w.Metadata().Annotate(server, tool, owner)
}

// LastReloadError is the last refused change, or nil when the file's
// current content is in force.
func (w *Watcher) LastReloadError() error {
	if w == nil {
		return nil
	}
	return w.file.LastReloadError()
}

// Reload reads the file again. A file that no longer validates (or is
// gone) is refused: the error is returned and logged, and the last good
// metadata stays in force.
func (w *Watcher) Reload() error { return w.file.Reload() }

// Watch reloads the file whenever it changes, until ctx is done; then it
// returns nil. It returns an error only when watching cannot start. See
// reloadfile.File.Watch.
func (w *Watcher) Watch(ctx context.Context) error { return w.file.Watch(ctx) }
