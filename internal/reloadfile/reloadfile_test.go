package reloadfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/logbuf"
)

// words is a file of one word per line; a line with a space in it does
// not parse, which is how these tests break the file.
type words []string

func readWords(path string) ([]byte, words, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var w words
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if strings.Contains(line, " ") {
			return nil, nil, fmt.Errorf("%s:%d: a word has no space", path, i+1)
		}
		w = append(w, line)
	}
	return raw, w, nil
}

var messages = Messages{Failed: "words refused", Reloaded: "words reloaded", ValidAgain: "words valid again", WatchError: "words watch error", Watch: "watch words"}

// syncBuffer is a log sink safe to read while it is written.
type syncBuffer = logbuf.Buffer

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A change that does not parse is refused and the last good content stays;
// a fix is taken; the same bytes again after a refusal say "valid again"
// and change nothing.
func TestReloadKeepsTheLastGoodContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "words")
	write(t, path, "alpha\nbeta\n")
	var logs syncBuffer
	f, err := Open(path, Options[words]{Read: readWords, Messages: messages,
		Attrs:  func(w words) []any { return []any{"words", len(w)} },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Current(); len(got) != 2 || got[1] != "beta" {
		t.Fatalf("Current = %v, want [alpha beta]", got)
	}

	write(t, path, "alpha\nno good\n")
	err = f.Reload()
	if err == nil || !strings.Contains(err.Error(), path+":2:") {
		t.Fatalf("Reload of a broken file = %v, want an error naming %s:2", err, path)
	}
	if got := f.Current(); len(got) != 2 || got[1] != "beta" || f.Failures() != 1 || f.LastReloadError() == nil {
		t.Fatalf("after a refused change: %v, %d failures, last error %v", got, f.Failures(), f.LastReloadError())
	}
	if !strings.Contains(logs.String(), `msg="words refused"`) {
		t.Errorf("refusal not logged:\n%s", logs.String())
	}

	write(t, path, "alpha\nbeta\n") // the content in force, unchanged
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if f.LastReloadError() != nil || !strings.Contains(logs.String(), `msg="words valid again"`) || strings.Contains(logs.String(), "words reloaded") {
		t.Errorf("the same bytes again: last error %v, log:\n%s", f.LastReloadError(), logs.String())
	}

	write(t, path, "gamma\n")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := f.Current(); len(got) != 1 || got[0] != "gamma" {
		t.Fatalf("after a good change: %v, want [gamma]", got)
	}
	if !strings.Contains(logs.String(), `msg="words reloaded"`) || !strings.Contains(logs.String(), "words=1") {
		t.Errorf("reload not logged with its attributes:\n%s", logs.String())
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing"), Options[words]{Read: readWords}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file = %v, want not exist", err)
	}
}

// Watch takes a file renamed into place (as editors and the team inbox
// write it) and a Kubernetes ConfigMap's ..data swap.
func TestWatchFollowsRenamesAndConfigMapSwaps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "words")
	write(t, path, "alpha\n")
	reloads := make(chan error, 16)
	watching := make(chan struct{})
	f, err := Open(path, Options[words]{Read: readWords, Messages: messages,
		OnReload: func(err error) { reloads <- err },
		Watching: func() { close(watching) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	<-watching
	// until waits for reloads (a step may make more than one) until the
	// word in force is want; every reload must succeed.
	until := func(what, want string) {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case err := <-reloads:
				if err != nil {
					t.Fatalf("reload after %s: %v", what, err)
				}
				if f.Current()[0] == want {
					return
				}
			case <-timeout:
				t.Fatalf("after %s: %v in force, want %s", what, f.Current(), want)
			}
		}
	}

	// The file renamed into place: its content is taken.
	tmp := filepath.Join(dir, ".words.tmp")
	write(t, tmp, "beta\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	until("the rename", "beta")

	// A ConfigMap-style swap: the file is a link through ..data, which
	// is replaced by a link to a new directory.
	v1, v2 := filepath.Join(dir, "..v1"), filepath.Join(dir, "..v2")
	for _, d := range []string{v1, v2} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(v1, "words"), "beta\n") // the content in force
	write(t, filepath.Join(v2, "words"), "gamma\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "words"), path); err != nil {
		t.Fatal(err)
	}
	// The switch keeps the content (beta): wait for its reload, so that
	// the swap's is not mistaken for it.
	select {
	case err := <-reloads:
		if err != nil || f.Current()[0] != "beta" {
			t.Fatalf("after the switch to a ConfigMap layout: %v, %v", err, f.Current())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no reload after the switch to a ConfigMap layout")
	}
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	until("the ..data swap", "gamma")
}

// Check refuses a change that parses (counted, logged at RefusedLevel, the
// last good content stays); Warn's message follows a change put in force.
func TestCheckRefusesAndWarnWarns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "words")
	write(t, path, "alpha\n")
	var logs syncBuffer
	f, err := Open(path, Options[words]{Read: readWords, Messages: messages,
		RefusedLevel: slog.LevelWarn,
		Check: func(inForce, next words) error {
			if len(next) == 1 && next[0] == "" {
				return errors.New("empty")
			}
			return nil
		},
		Warn: func(inForce, next words) string {
			if len(next) < len(inForce) {
				return "fewer words"
			}
			return ""
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, "")
	if err := f.Reload(); err == nil || err.Error() != "empty" || f.Failures() != 1 || f.Current()[0] != "alpha" {
		t.Fatalf("Reload of an empty file = %v, %d failures, %v", err, f.Failures(), f.Current())
	}
	if !strings.Contains(logs.String(), `level=WARN msg="words refused"`) {
		t.Errorf("logs:\n%s", logs.String())
	}
	write(t, path, "alpha\nbeta\n")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	write(t, path, "beta\n")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="fewer words" file=`+path) {
		t.Errorf("logs:\n%s", logs.String())
	}
}
