package policies

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
)

// reloadWait bounds how long a test waits for a reload it expects. The
// product reloads within a second; the bound is generous so that a busy
// machine does not fail the test (the wait ends as soon as it is seen).
const reloadWait = 15 * time.Second

func policyWithMessage(msg string) string {
	return "package fulfiller\n\ndecision := {\"action\": \"fulfill\", \"message\": \"" + msg + "\"}\n"
}

// watchEvent is one thing Watch did (see Engine.watchTrace).
type watchEvent struct{ what, name string }

// startWatch runs e.Watch until the test ends and returns what it does,
// once its watches are in place: an edit made before then is never seen.
func startWatch(t *testing.T, e *Engine) <-chan watchEvent {
	t.Helper()
	events := make(chan watchEvent, 1024)
	e.watchTrace = func(what, name string) {
		select {
		case events <- watchEvent{what, name}:
		default: // a test reads far fewer; never block the watcher
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	awaitWatch(t, events, "watching", "")
	return events
}

// awaitWatch waits until Watch reports what (for a name ending in
// suffix), skipping its other events.
func awaitWatch(t *testing.T, events <-chan watchEvent, what, suffix string) {
	t.Helper()
	timeout := time.After(reloadWait)
	for {
		select {
		case ev := <-events:
			if ev.what == what && strings.HasSuffix(ev.name, suffix) {
				return
			}
		case <-timeout:
			t.Fatalf("Watch never reported %s %s", what, suffix)
		}
	}
}

func TestWatchReloadsDirectory(t *testing.T) {
	var logs logBuffer
	dir := writeTree(t, map[string]string{
		"main.rego":      policyWithMessage("v1"),
		"sub/.keep":      "",
		"data/data.json": `{"limit": 1}`,
	})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout,
		Policies: []string{dir},
		Data:     []string{filepath.Join(dir, "data")},
		Logger:   textLogger(&logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	events := startWatch(t, e)
	message := func() string { return e.Decide(t.Context(), &Input{}).Message }

	// Change a file: the new decision is in force (within a second; the
	// test allows more).
	v1 := e.Revision()
	writeFile(t, filepath.Join(dir, "main.rego"), policyWithMessage("v2"))
	start := time.Now()
	if !poll.Within(reloadWait, func() bool { return message() == "v2" }) {
		t.Fatalf("after edit: message %q, want v2", message())
	}
	t.Logf("reload took %v", time.Since(start))
	if e.Revision() == v1 {
		t.Error("revision did not change")
	}
	if d := e.Decide(t.Context(), &Input{}); d.Revision != e.Revision() {
		t.Errorf("decision revision %q, engine %q", d.Revision, e.Revision())
	}

	// Break it: the old decision stays and the error names file:line.
	v2 := e.Revision()
	writeFile(t, filepath.Join(dir, "main.rego"), "package fulfiller\n\ndecision := {\"action\": \"fulfill\",\n")
	if !poll.Within(reloadWait, func() bool { return e.LastReloadError() != nil }) {
		t.Fatal("broken policy: no reload error")
	}
	if want := filepath.Join(dir, "main.rego") + ":"; !strings.HasPrefix(e.LastReloadError().Error(), want) {
		t.Errorf("LastReloadError = %v, want it to start with %s<line>", e.LastReloadError(), want)
	}
	if message() != "v2" || e.Revision() != v2 {
		t.Errorf("after a broken edit: message %q revision %s, want v2 %s", message(), e.Revision(), v2)
	}
	// The error is recorded just before it is logged: wait for the line.
	if !poll.Within(reloadWait, func() bool { return strings.Contains(logs.String(), "policy reload failed") }) {
		t.Errorf("failure not logged: %s", logs.String())
	}

	// Fix it by atomic rename, as editors do; a file in a new
	// subdirectory is picked up too.
	tmp := filepath.Join(dir, ".main.rego.tmp")
	writeFile(t, tmp, policyWithMessage("v3"))
	if err := os.Rename(tmp, filepath.Join(dir, "main.rego")); err != nil {
		t.Fatal(err)
	}
	if !poll.Within(reloadWait, func() bool { return message() == "v3" }) {
		t.Fatalf("after rename: message %q, want v3", message())
	}
	if e.LastReloadError() != nil {
		t.Errorf("LastReloadError after fix = %v", e.LastReloadError())
	}
	writeFile(t, filepath.Join(dir, "newdir", "extra.rego"), "package fulfiller.extra\n\nx := 1\n")
	if !poll.Within(reloadWait, func() bool { return len(e.Files()) == 3 }) {
		t.Errorf("file in new directory not loaded: %v", e.Files())
	}

	// Data changes are watched as well.
	before := e.Revision()
	writeFile(t, filepath.Join(dir, "data", "data.json"), `{"limit": 2}`)
	if !poll.Within(reloadWait, func() bool { return e.Revision() != before }) {
		t.Error("data change not picked up")
	}

	// Test files do not trigger reloads and are not loaded: the watcher
	// sees the write and sets it aside.
	writeFile(t, filepath.Join(dir, "main_test.rego"), "not rego at all")
	awaitWatch(t, events, "ignored", "main_test.rego")
	if e.LastReloadError() != nil {
		t.Errorf("a _test.rego broke the policy: %v", e.LastReloadError())
	}
}

func TestWatchNamedFile(t *testing.T) {
	dir := writeTree(t, map[string]string{"p.rego": policyWithMessage("v1"), "other.rego": "not rego"})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{filepath.Join(dir, "p.rego")}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	events := startWatch(t, e)
	writeFile(t, filepath.Join(dir, "p.rego"), policyWithMessage("v2"))
	if !poll.Within(reloadWait, func() bool { return e.Decide(t.Context(), &Input{}).Message == "v2" }) {
		t.Fatal("named file change not picked up")
	}
	// Siblings that are not named are irrelevant.
	writeFile(t, filepath.Join(dir, "other.rego"), "still not rego")
	awaitWatch(t, events, "ignored", "other.rego")
	if e.LastReloadError() != nil {
		t.Errorf("unrelated file caused a reload error: %v", e.LastReloadError())
	}
}

func TestWatchDefaultPolicyReturnsOnCancel(t *testing.T) {
	e, err := Load(t.Context(), Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := e.Watch(ctx); err != nil {
		t.Errorf("Watch = %v", err)
	}
}

// A --policy that is a symlink to a directory (a "current" link a deploy
// swaps) loads the directory's files, and swapping the link to another
// directory reloads from there.
func TestWatchSymlinkedDirectory(t *testing.T) {
	base := t.TempDir()
	v1 := writeTree(t, map[string]string{"main.rego": policyWithMessage("v1")})
	v2 := writeTree(t, map[string]string{"main.rego": policyWithMessage("v2")})
	current := filepath.Join(base, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{current}, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Load through a symlinked directory: %v", err)
	}
	if got := e.Decide(t.Context(), &Input{}).Message; got != "v1" {
		t.Fatalf("message %q, want v1", got)
	}
	if files := e.Files(); len(files) != 1 || files[0] != filepath.Join(current, "main.rego") {
		t.Errorf("files %v, want the file named under the link", files)
	}
	startWatch(t, e)

	// Swapped as deploy tools do: a new link renamed over the old one.
	next := filepath.Join(base, ".current.next")
	if err := os.Symlink(v2, next); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, current); err != nil {
		t.Fatal(err)
	}
	if !poll.Within(reloadWait, func() bool { return e.Decide(t.Context(), &Input{}).Message == "v2" }) {
		t.Fatal("swapped link not picked up")
	}
	// And the new directory is watched.
	writeFile(t, filepath.Join(v2, "main.rego"), policyWithMessage("v3"))
	if !poll.Within(reloadWait, func() bool { return e.Decide(t.Context(), &Input{}).Message == "v3" }) {
		t.Fatal("edit in the new link target not picked up")
	}
}
