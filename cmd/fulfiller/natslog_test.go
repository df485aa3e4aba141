package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestTranslateNATS: the NATS file store's recovery warnings (every form
// nats-server v2.15 writes after an unclean stop) become one INFO line of
// fulfiller's, the originals DEBUG; a corruption warning stays WARN, and a
// fulfiller WARN with the same words is left alone.
func TestTranslateNATS(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(translateNATS(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	nats := log.With("component", "state").With("component", "nats")
	for _, stream := range []string{"KV_a", "KV_b", "KV_c", "KV_d"} {
		nats.Warn("Filestore [" + stream + "] Stream state outdated, last block has additional entries, will rebuild")
		nats.Warn("Filestore [" + stream + "] Stream state outdated, found extra blocks, will rebuild")
		nats.Warn("Filestore [" + stream + "] TTL state is outdated; attempting to recover using linear scan (seq 1 to 9)")
	}
	nats.Warn("Filestore [KV_e] Stream state corrupt subject detected")
	log.Warn("Filestore [KV_f] Stream state outdated, found extra blocks, will rebuild")
	want := `level=INFO msg="` + msgStoreRecovering + `" component=state component=nats
level=WARN msg="Filestore [KV_e] Stream state corrupt subject detected" component=state component=nats
level=WARN msg="Filestore [KV_f] Stream state outdated, found extra blocks, will rebuild"
`
	var got strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		_, rest, _ := strings.Cut(line, " ") // the time
		got.WriteString(rest + "\n")
	}
	if got.String() != want {
		t.Errorf("logged:\n%s\nwant:\n%s", got.String(), want)
	}

	buf.Reset()
	log = slog.New(translateNATS(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.With("component", "nats").Warn("Filestore [KV_a] TTL state is outdated; attempting to recover using linear scan (seq 1 to 1)")
	if s := buf.String(); strings.Count(s, "\n") != 2 || !strings.Contains(s, "level=INFO") || !strings.Contains(s, `level=DEBUG msg="Filestore [KV_a] TTL state is outdated`) {
		t.Errorf("at debug:\n%s", s)
	}
}
