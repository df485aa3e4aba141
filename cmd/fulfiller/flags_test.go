package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "512KiB": 512 << 10, "1MiB": 1 << 20, "2 MiB": 2 << 20, "64K": 64 << 10} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1", "0", "1.5MiB", "1TB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
	if s := formatSize(1 << 20); s != "1MiB" {
		t.Errorf("formatSize = %s", s)
	}
}

// TestJSONLogDurations: --log-format json writes durations as the text
// format and the flags do ("1.5s"), in groups too, not as nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var buf strings.Builder
	log, err := newLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("state store open", "lease", 1500*time.Millisecond, slog.Group("limits", "ttl", 10*time.Minute), "count", 3)
	var got map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &got); err != nil {
		t.Fatal(err)
	}
	if got["lease"] != "1.5s" || got["limits"].(map[string]any)["ttl"] != "10m0s" || got["count"] != 3.0 {
		t.Errorf("logged %s", buf.String())
	}
}
