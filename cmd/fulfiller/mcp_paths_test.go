package main

import (
	"path/filepath"
	"testing"
)

func TestMCPDefaultDirsFollowXDG(t *testing.T) {
	t.Setenv("HOME", "/home/ann")
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	if got, want := mcpStateDir(), "/home/ann/.local/state/fulfiller"; got != want {
		t.Errorf("state dir %q, want %q", got, want)
	}
	if got, want := mcpConfigDir(), "/home/ann/.config/fulfiller"; got != want {
		t.Errorf("config dir %q, want %q", got, want)
	}
	t.Setenv("XDG_STATE_HOME", "/var/lib/ann")
	t.Setenv("XDG_CONFIG_HOME", "relative/ignored")
	if got, want := mcpStateDir(), filepath.Join("/var/lib/ann", "fulfiller"); got != want {
		t.Errorf("state dir %q, want %q", got, want)
	}
	if got, want := mcpConfigDir(), "/home/ann/.config/fulfiller"; got != want {
		t.Errorf("a relative XDG_CONFIG_HOME is ignored (the spec): got %q, want %q", got, want)
	}
}
