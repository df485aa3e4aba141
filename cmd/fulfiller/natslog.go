package main

import (
	"context"
	"log/slog"
	"regexp"
	"sync"
)

// natsRecovery matches what the embedded NATS server's file store says,
// once per stream, when it opens a directory that was not shut down
// cleanly (kill -9, a crash, power lost) and rebuilds its index from the
// data: routine recovery, not a fault. Corruption and inconsistency
// messages do not match: they stay WARN.
var natsRecovery = regexp.MustCompile(`^Filestore \[[^\]]*\] (Stream state outdated, .*will rebuild|(TTL|Sourcing|Message scheduling) state is outdated; attempting to recover .*)$`)

// msgStoreRecovering is the one line, in fulfiller's words, that stands
// for the NATS file store's recovery warnings (docs/state.md).
const msgStoreRecovering = "state store was not stopped cleanly (kill -9, a crash, power lost): rebuilding its index from the data on disk; nothing to do"

// translateNATS wraps h so that the embedded NATS server's recovery
// warnings (records of a logger With component=nats whose message
// natsRecovery matches) are logged at DEBUG as they are, and the first of
// them also as msgStoreRecovering at INFO: after an unclean stop an
// operator sees one line saying what happened instead of a WARN per
// stream that reads like damage.
func translateNATS(h slog.Handler) slog.Handler {
	return &natsHandler{inner: h, once: &sync.Once{}}
}

// natsHandler is translateNATS's handler; nats is set in the loggers
// derived With component=nats.
type natsHandler struct {
	inner slog.Handler
	nats  bool
	once  *sync.Once
}

func (h *natsHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *natsHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.nats || r.Level != slog.LevelWarn || !natsRecovery.MatchString(r.Message) {
		return h.inner.Handle(ctx, r)
	}
	var err error
	h.once.Do(func() {
		info := slog.NewRecord(r.Time, slog.LevelInfo, msgStoreRecovering, r.PC)
		if h.inner.Enabled(ctx, slog.LevelInfo) {
			err = h.inner.Handle(ctx, info)
		}
	})
	if h.inner.Enabled(ctx, slog.LevelDebug) {
		debug := r.Clone()
		debug.Level = slog.LevelDebug
		if derr := h.inner.Handle(ctx, debug); err == nil {
			err = derr
		}
	}
	return err
}

func (h *natsHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	nats := h.nats
	for _, a := range attrs {
		if a.Key == "component" && a.Value.Kind() == slog.KindString && a.Value.String() == "nats" {
			nats = true
		}
	}
	return &natsHandler{inner: h.inner.WithAttrs(attrs), nats: nats, once: h.once}
}

func (h *natsHandler) WithGroup(name string) slog.Handler {
	return &natsHandler{inner: h.inner.WithGroup(name), nats: h.nats, once: h.once}
}
