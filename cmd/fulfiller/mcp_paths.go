package main

import (
	"os"
	"path/filepath"
)

// A client starts `fulfiller mcp` in whatever directory it likes, so the
// front end's defaults are the user's (XDG base directories), never the
// working directory's.

// mcpStateDir is --state's default for `fulfiller mcp`:
// $XDG_STATE_HOME/fulfiller, else ~/.local/state/fulfiller.
func mcpStateDir() string {
	return filepath.Join(xdgDir("XDG_STATE_HOME", ".local", "state"), "fulfiller")
}

// mcpConfigDir is where `fulfiller mcp init` writes and `fulfiller mcp`
// reads its policy by default: $XDG_CONFIG_HOME/fulfiller, else
// ~/.config/fulfiller. The policies are its policies/ directory, their
// data its data.yaml.
func mcpConfigDir() string { return filepath.Join(xdgDir("XDG_CONFIG_HOME", ".config"), "fulfiller") }

// xdgDir is the directory named by the environment variable env when it
// is an absolute path (the XDG spec ignores relative ones), else the
// home directory joined with def.
func xdgDir(env string, def ...string) string {
	if d := os.Getenv(env); filepath.IsAbs(d) {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		// No home (a bare container): the working directory's, named
		// as such rather than failing before flags are read.
		home = "."
	}
	return filepath.Join(append([]string{home}, def...)...)
}
