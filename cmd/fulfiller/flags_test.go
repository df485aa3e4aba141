package main

import "testing"

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
