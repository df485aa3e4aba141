package main

import (
	"context"
	"log/slog"
	"sync"
)

// holdLogs returns a logger that holds what is logged through it (and
// through loggers derived from it) until release is called: with flush
// true the held records are written, in order, and everything from then
// on goes straight through; with flush false they are dropped.
//
// run checks its whole configuration before it starts anything, and a
// fatal error in it is printed alone: an operator reading "prompts are
// not signed" above "--state x: permission denied" looks for the wrong
// problem. The warnings come back on the run after the error is fixed.
func holdLogs(log *slog.Logger) (held *slog.Logger, release func(flush bool)) {
	st := &holdState{holding: true}
	return slog.New(&holdHandler{inner: log.Handler(), st: st}), st.release
}

// holdState is shared by a held logger and every logger derived from it.
type holdState struct {
	mu      sync.Mutex
	holding bool
	held    []heldRecord
}

// heldRecord is a record and the handler (with its attributes and
// groups) that is to write it.
type heldRecord struct {
	h slog.Handler
	r slog.Record
}

func (st *holdState) release(flush bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.holding {
		return
	}
	st.holding = false
	if flush {
		for _, hr := range st.held {
			_ = hr.h.Handle(context.Background(), hr.r)
		}
	}
	st.held = nil
}

// holdHandler is the slog.Handler of holdLogs.
type holdHandler struct {
	inner slog.Handler
	st    *holdState
}

func (h *holdHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *holdHandler) Handle(ctx context.Context, r slog.Record) error {
	h.st.mu.Lock()
	if h.st.holding {
		h.st.held = append(h.st.held, heldRecord{h: h.inner, r: r.Clone()})
		h.st.mu.Unlock()
		return nil
	}
	h.st.mu.Unlock()
	return h.inner.Handle(ctx, r)
}

func (h *holdHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &holdHandler{inner: h.inner.WithAttrs(attrs), st: h.st}
}

func (h *holdHandler) WithGroup(name string) slog.Handler {
	return &holdHandler{inner: h.inner.WithGroup(name), st: h.st}
}
