package approverkeys_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/internal/logbuf"
)

// syncBuffer is a log sink safe to read while it is written.
type syncBuffer = logbuf.Buffer

func keyLine(t *testing.T, id string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return id + " " + approval.EncodePublicKey(pub) + "\n"
}

// watched opens path, starts Watch and returns the watcher and its
// reload outcomes; the watch stops when the test ends.
func watched(t *testing.T, path string, logs *syncBuffer) (*approverkeys.Watcher, func(wantErr bool) error) {
	t.Helper()
	reloads := make(chan error, 16)
	watching := make(chan struct{})
	w, err := approverkeys.Open(path, approverkeys.Options{
		OnReload: func(err error) { reloads <- err },
		Watching: func() { close(watching) },
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-watching
	// waitReload waits for the reload that settles on what the test
	// wrote last: a burst of events can end in more than one reload.
	return w, func(wantErr bool) error {
		t.Helper()
		for {
			select {
			case err := <-reloads:
				if (err != nil) == wantErr {
					return err
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no reload (wantErr %v)", wantErr)
			}
		}
	}
}

// TestWatchReloads: an approver added to the file is keyed once it is
// reloaded; a broken file is refused, logged, and the last good keys stay
// in force; fixing it takes. The log says how many keys, never a key.
func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "passkeys")
	write := func(text string) {
		t.Helper()
		// As the team inbox and editors do: a new file renamed over the old.
		tmp := filepath.Join(dir, "passkeys.tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob := keyLine(t, "alice"), keyLine(t, "bob")
	write(alice)
	var logs syncBuffer
	w, waitReload := watched(t, path, &logs)
	if got := w.Keys().IDs(); len(got) != 1 || got[0] != "alice" {
		t.Fatalf("at start: %v", got)
	}

	// Readers during reloads see one whole set or the other (-race).
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
				if k := w.Keys(); !k.Has("alice") {
					t.Error("alice unkeyed during a reload")
					return
				}
			}
		}
	}()

	write(alice + bob)
	waitReload(false)
	if !w.Has("bob") || !w.Has("alice") {
		t.Fatalf("after bob enrolled: %v", w.Keys().IDs())
	}
	if !strings.Contains(logs.String(), `msg="approver keys reloaded" file=`+path+` approvers=2 ed25519=2 passkeys=0`) {
		t.Errorf("logs:\n%s", logs.String())
	}

	write(alice + "carol not-a-key\n")
	err := waitReload(true)
	if want := path + ":2: key of carol:"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("reload error %v, want it to start %s", err, want)
	}
	if !w.Has("bob") || w.Has("carol") {
		t.Fatalf("a broken file was not refused: %v", w.Keys().IDs())
	}
	if w.LastReloadError() == nil || w.ReloadFailures() == 0 {
		t.Errorf("after a refused change: LastReloadError %v, %d failures", w.LastReloadError(), w.ReloadFailures())
	}
	if !strings.Contains(logs.String(), "approver keys reload failed; the last good keys stay in force") {
		t.Errorf("logs:\n%s", logs.String())
	}

	os.Remove(path)
	waitReload(true)
	if !w.Has("bob") {
		t.Fatal("a removed file dropped the keys in force")
	}

	write(alice)
	waitReload(false)
	if w.Has("bob") || !w.Has("alice") || w.LastReloadError() != nil {
		t.Fatalf("after bob's key was removed: %v, %v", w.Keys().IDs(), w.LastReloadError())
	}
	close(stop)
	readers.Wait()
	for _, line := range []string{alice, bob} {
		if key := strings.Fields(line)[1]; strings.Contains(logs.String(), key) {
			t.Errorf("a key was logged:\n%s", logs.String())
		}
	}
}

// TestWatchConfigMapSwap: a Kubernetes ConfigMap volume changes by
// pointing its ..data link at a new directory; the file's own name is a
// link through ..data and sees no event of its own.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, text string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "approver-keys"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(name string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", keyLine(t, "alice"))
	swap("..v1")
	path := filepath.Join(dir, "approver-keys")
	if err := os.Symlink(filepath.Join("..data", "approver-keys"), path); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	w, waitReload := watched(t, path, &logs)
	version("..v2", keyLine(t, "alice")+keyLine(t, "bob"))
	swap("..v2")
	waitReload(false)
	if got := w.Keys().IDs(); len(got) != 2 {
		t.Fatalf("after the swap: %v", got)
	}
}

// TestOpenRefusesABrokenFile: there is no last good set to fall back on
// at start, so the error names the file and line.
func TestOpenRefusesABrokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(keyLine(t, "alice")+keyLine(t, "alice")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := approverkeys.Open(path, approverkeys.Options{})
	if err == nil || err.Error() != path+":2: approver alice is listed twice" {
		t.Fatalf("got %v", err)
	}
	var nilWatcher *approverkeys.Watcher
	if nilWatcher.Has("alice") || len(nilWatcher.Keys().IDs()) != 0 || nilWatcher.LastReloadError() != nil {
		t.Error("a nil watcher holds keys")
	}
}

// TestTruncatedWriteKeepsTheKeys: a writer that is not atomic truncates
// the file and writes it back a moment later (issue 41, row 5). The
// empty file in between is refused at WARN, and the keys in force stay:
// signed approvals never silently turn off. A file of comments only is
// as empty. Removing every key is an explicit act: a file whose only line
// is `none`, logged at WARN.
func TestTruncatedWriteKeepsTheKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "approver-keys")
	alice := keyLine(t, "alice")
	if err := os.WriteFile(path, []byte(alice), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	w, waitReload := watched(t, path, &logs)

	// Truncated in place (O_TRUNC), as a non-atomic writer leaves it.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := waitReload(true)
	if want := path + ": no approver keys: an empty file (or one of comments only) is refused while keys are in force; write `none` to remove every key"; err == nil || err.Error() != want {
		t.Fatalf("reload of a truncated file = %v, want %q", err, want)
	}
	if !w.Has("alice") || w.ReloadFailures() != 1 {
		t.Fatalf("a truncated file dropped the keys: %v, %d failures", w.Keys().IDs(), w.ReloadFailures())
	}
	if !strings.Contains(logs.String(), `level=WARN msg="approver keys reload failed; the last good keys stay in force" file=`+path) {
		t.Errorf("the refusal is not a warning:\n%s", logs.String())
	}

	if err := os.WriteFile(path, []byte("# being rewritten\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(true)
	if !w.Has("alice") {
		t.Fatal("a file of comments only dropped the keys")
	}

	// Written back: in force again.
	if err := os.WriteFile(path, []byte(alice), 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(false)
	if !w.Has("alice") || w.LastReloadError() != nil {
		t.Fatalf("after the write-back: %v, %v", w.Keys().IDs(), w.LastReloadError())
	}

	// `none` beside a key is a contradiction: refused.
	if err := os.WriteFile(path, []byte("none\n"+alice), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := waitReload(true); err == nil || !strings.HasPrefix(err.Error(), path+":2: ") {
		t.Fatalf("none beside a key: %v", err)
	}

	// The explicit act: every key removed, said at WARN.
	if err := os.WriteFile(path, []byte("# alice left\nnone\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(false)
	if len(w.Keys().IDs()) != 0 {
		t.Fatalf("after `none`: %v", w.Keys().IDs())
	}
	if !strings.Contains(logs.String(), `level=WARN msg="approver keys removed: every approver's answers are taken on the gateway's word" file=`+path) {
		t.Errorf("removing every key is not a warning:\n%s", logs.String())
	}
	// With no keys in force, an empty file changes nothing and is fine.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(false)
}

// TestAbsentFileIsNoEnrolmentYet: run may start before the team inbox has
// made its passkeys file (docs/operations.md's order). A missing file in
// a directory that exists is no approver enrolled yet: no keys, a WARN
// saying so, and the file is read when it appears, empty as serve first
// writes it and then with a key. Once read, the file going away is a
// refused change. A missing directory is still an error.
func TestAbsentFileIsNoEnrolmentYet(t *testing.T) {
	dir := t.TempDir()
	if _, err := approverkeys.Open(filepath.Join(dir, "nodir", "passkeys"), approverkeys.Options{}); err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("missing directory: %v, want no such file or directory", err)
	}

	path := filepath.Join(dir, "passkeys")
	var logs syncBuffer
	w, waitReload := watched(t, path, &logs)
	if got := w.Keys().IDs(); len(got) != 0 {
		t.Fatalf("keys before the file exists: %v", got)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\""+approverkeys.MsgAbsent+"\" file="+path) {
		t.Errorf("logs:\n%s", logs.String())
	}
	// As serve does at its first start: an empty file, mode 0600.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(false)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(keyLine(t, "alice")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitReload(false)
	if !w.Has("alice") {
		t.Fatalf("after alice enrolled: %v", w.Keys().IDs())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := waitReload(true); !errors.Is(err, fs.ErrNotExist) || !w.Has("alice") {
		t.Fatalf("file removed: reload error %v, keys %v; want refused with alice still keyed", err, w.Keys().IDs())
	}
}
