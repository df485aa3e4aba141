package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// fakePart records its Start and Stop in a shared journal; startErr and
// stopErr are what they return. Its Start runs a goroutine until Stop,
// as the sidecar's parts do.
type fakePart struct {
	name              string
	journal           *[]string
	startErr, stopErr error
	tasks             tasks
}

func (p *fakePart) Start(ctx context.Context) error {
	*p.journal = append(*p.journal, "start "+p.name)
	if p.startErr != nil {
		return p.startErr
	}
	p.tasks.goRun(ctx, func(ctx context.Context) { <-ctx.Done() })
	return nil
}

func (p *fakePart) Stop() error {
	*p.journal = append(*p.journal, "stop "+p.name)
	p.tasks.stop()
	return p.stopErr
}

// newRunner is a runner of fake parts named a, b, c, … in that order.
func newRunner(journal *[]string, parts ...*fakePart) *runner {
	r := &runner{log: slog.New(slog.DiscardHandler)}
	for i, p := range parts {
		p.name, p.journal = string(rune('a'+i)), journal
		r.add(p.name, p)
	}
	return r
}

func TestRunnerStartsInOrderAndStopsInReverse(t *testing.T) {
	checkNoLeak(t)
	var journal []string
	r := newRunner(&journal, &fakePart{}, &fakePart{}, &fakePart{})
	// The goroutines the parts run outlive the starting context.
	ctx, cancel := context.WithCancel(t.Context())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(journal, want) {
		t.Errorf("journal %q, want %q", journal, want)
	}
	if err := r.Stop(); err != nil || len(journal) != len(want) {
		t.Errorf("a second Stop: %v, journal %q; want nothing stopped again", err, journal)
	}
	if err := r.Start(t.Context()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// A part that fails to start: those started before it stop in reverse,
// it is not stopped (its Start cleaned up), those after it are neither
// started nor stopped. The error is its Start's, unchanged, joined with
// those of the Stops it caused.
func TestRunnerStartFailureStopsTheStartedInReverse(t *testing.T) {
	checkNoLeak(t)
	var journal []string
	startErr := &StartError{Part: PartJoin, Err: errors.New("no gateway")}
	stopErr := errors.New("b did not stop cleanly")
	r := newRunner(&journal, &fakePart{}, &fakePart{stopErr: stopErr}, &fakePart{startErr: startErr}, &fakePart{})
	err := r.Start(t.Context())
	var se *StartError
	if !errors.As(err, &se) || se != startErr || !errors.Is(err, stopErr) {
		t.Fatalf("start: %v; want the StartError joined with b's stop error", err)
	}
	want := []string{"start a", "start b", "start c", "stop b", "stop a"}
	if !slices.Equal(journal, want) {
		t.Errorf("journal %q, want %q", journal, want)
	}
	if err := r.Stop(); err != nil || len(journal) != len(want) {
		t.Errorf("Stop after a failed Start: %v, journal %q; want nothing stopped again", err, journal)
	}

	// Alone, the Start error is returned as it is.
	journal = nil
	r = newRunner(&journal, &fakePart{}, &fakePart{startErr: startErr})
	if err := r.Start(t.Context()); err != startErr {
		t.Errorf("start: %#v, want the part's own error", err)
	}
}

// Stop stops every part whatever the others return, and joins their
// errors; a second Stop returns the same errors without stopping again.
func TestRunnerStopJoinsErrors(t *testing.T) {
	checkNoLeak(t)
	var journal []string
	errA, errC := errors.New("a failed to stop"), &ShutdownError{Lost: 1, msg: "c lost an answer"}
	r := newRunner(&journal, &fakePart{stopErr: errA}, &fakePart{}, &fakePart{stopErr: errC})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	err := r.Stop()
	var sh *ShutdownError
	if !errors.Is(err, errA) || !errors.As(err, &sh) || sh != errC {
		t.Fatalf("stop: %v; want both errors", err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(journal, want) {
		t.Errorf("journal %q, want %q", journal, want)
	}
	if again := r.Stop(); again != err || len(journal) != len(want) {
		t.Errorf("a second Stop: %v, journal %q; want the first's result and nothing stopped again", again, journal)
	}

	// One error is returned as it is.
	journal = nil
	r = newRunner(&journal, &fakePart{}, &fakePart{stopErr: errC})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != errC {
		t.Errorf("stop: %#v, want the part's own error", err)
	}
}

// The sidecar's parts start in the order docs/design.md gives (Stop
// reverses it); the store, its probe and the notifier only when
// configured.
func TestSidecarPartsInDesignOrder(t *testing.T) {
	names := func(cfg Config) []string {
		t.Helper()
		sc, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, p := range sc.parts.parts {
			ns = append(ns, p.name)
		}
		return ns
	}
	cfg := Config{Gateway: "ws://gateway.invalid/", ID: "fulfiller"}
	want := []string{"operations", "policy", "shutdown account", "client", "approvals", "grants", "watches", "fulfiller"}
	if got := names(cfg); !slices.Equal(got, want) {
		t.Errorf("parts %q, want %q", got, want)
	}
	target, err := notify.ParseTarget("https://hooks.invalid/", notify.Options{Secret: []byte("test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.State, cfg.Notify = &StateConfig{Mode: state.Mode{Kind: state.Memory}}, []notify.Target{target}
	want = []string{"operations", "notifier", "policy", "state store", "state store probe", "shutdown account", "client", "approvals", "grants", "watches", "fulfiller"}
	if got := names(cfg); !slices.Equal(got, want) {
		t.Errorf("parts %q, want %q", got, want)
	}
}
