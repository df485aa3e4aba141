package policies

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce is how long Watch waits for a burst of file events (an
// editor's write-rename-chmod, a git checkout of many files) to end before
// it reloads once.
const watchDebounce = 100 * time.Millisecond

// Watch reloads the policy set whenever a policy or data file changes, until
// ctx is done; then it returns nil. It returns an error only when watching
// cannot start. Each reload's outcome is logged (see Reload); a broken
// change leaves the last good policy in force.
//
// Directories are watched recursively, including ones created later. Named
// files are watched through their directory, because editors and
// Kubernetes ConfigMaps replace files by renaming, which ends a watch on
// the file itself.
func (e *Engine) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policies: %w", err)
	}
	defer w.Close()

	t := newWatchTargets(e.opts.Policies, e.opts.Data)
	if len(t.files) == 0 && len(t.roots) == 0 {
		<-ctx.Done()
		return nil
	}
	t.addAll(w, e)
	e.log.Debug("watching policy files", "policies", e.opts.Policies, "data", e.opts.Data)
	e.traceWatch("watching", "")

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !t.relevant(ev.Name) {
				e.traceWatch("ignored", ev.Name)
				continue
			}
			if ev.Has(fsnotify.Create) {
				// A new directory under a watched tree needs its own
				// watch; files created in it later would be missed.
				if info, err := os.Stat(ev.Name); err == nil && info.IsDir() {
					t.addTree(w, e, ev.Name)
				}
			}
			timer.Reset(watchDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			e.log.Warn("policy watch error", "error", err)
		case <-timer.C:
			_ = e.Reload(ctx) // logged and recorded by Reload
			// A path that was missing may be back (a file re-created,
			// a directory restored): watch what exists now.
			t.addAll(w, e)
		}
	}
}

func (e *Engine) traceWatch(what, name string) {
	if e.watchTrace != nil {
		e.watchTrace(what, name)
	}
}

// watchTargets says which paths to watch and which events matter.
type watchTargets struct {
	files map[string]bool // named files (cleaned) → watched through their dir
	roots []string        // named directories, watched recursively
}

func newWatchTargets(policies, data []string) *watchTargets {
	t := &watchTargets{files: map[string]bool{}}
	for _, p := range append(append([]string(nil), policies...), data...) {
		// Absolute paths, so that event names (which fsnotify builds from
		// the watched path) compare equal whatever the working directory.
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		p = filepath.Clean(p)
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			t.roots = append(t.roots, p)
		} else {
			t.files[p] = true
		}
	}
	return t
}

func (t *watchTargets) addAll(w *fsnotify.Watcher, e *Engine) {
	for f := range t.files {
		t.add(w, e, filepath.Dir(f))
	}
	for _, r := range t.roots {
		if walkRoot(r) != r {
			// A symlinked root: its parent sees the link swapped for
			// one to another directory (an event named r), after which
			// addAll watches the new tree.
			t.add(w, e, filepath.Dir(r))
		}
		t.addTree(w, e, r)
	}
}

func (t *watchTargets) addTree(w *fsnotify.Watcher, e *Engine, root string) {
	root = walkRoot(root)
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone or unreadable: the reload reports it
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && isHidden(d.Name()) && !strings.HasPrefix(d.Name(), "..") {
			return filepath.SkipDir
		}
		t.add(w, e, path)
		return nil
	})
}

func (t *watchTargets) add(w *fsnotify.Watcher, e *Engine, dir string) {
	if err := w.Add(dir); err != nil && !os.IsNotExist(err) {
		e.log.Warn("cannot watch policy directory", "dir", dir, "error", err)
	}
}

// relevant reports whether an event on name can change the policy set.
// Names starting with ".." are Kubernetes' atomic-update symlinks
// (..data), through which a mounted ConfigMap changes.
func (t *watchTargets) relevant(name string) bool {
	if abs, err := filepath.Abs(name); err == nil {
		name = abs
	}
	base := filepath.Base(name)
	if t.files[name] || strings.HasPrefix(base, "..") {
		return true
	}
	for _, r := range t.roots {
		if name == r || strings.HasPrefix(name, r+string(filepath.Separator)) {
			if isHidden(base) {
				return false
			}
			switch filepath.Ext(base) {
			case ".rego":
				return !isTestFile(base)
			case ".json", ".yaml", ".yml", "":
				return true // "" may be a directory coming or going
			}
			return false
		}
	}
	return false
}
