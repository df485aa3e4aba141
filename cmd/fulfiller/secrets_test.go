package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestSecretFileTrimmed: a token file is read once, whitespace around the
// token trimmed (editors add a newline); a second line is refused rather
// than silently sent as part of the token.
func TestSecretFileTrimmed(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	for content, want := range map[string]string{"tok\n": "tok", "  tok \r\n": "tok", "tok": "tok"} {
		p := filepath.Join(dir, "t")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := joinToken.resolve(log, "", p); err != nil || got != want {
			t.Errorf("file %q: %q, %v; want %q", content, got, err, want)
		}
	}
	p := filepath.Join(dir, "two")
	if err := os.WriteFile(p, []byte("tok\nother\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := joinToken.resolve(log, "", p); exitCode(err) != 2 || err.Error() != "--token-file "+p+": more than one line; the file must hold just the token" {
		t.Errorf("two lines: %v", err)
	}
	if got, err := joinToken.resolve(log, "from-flag", ""); err != nil || got != "from-flag" {
		t.Errorf("flag only: %q, %v", got, err)
	}
}

// TestIsLoopback: only addresses that bind loopback alone may serve the
// operator API without a token.
func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9464": true, "127.1.2.3:0": true, "[::1]:9464": true, "localhost:9464": true,
		":9464": false, "0.0.0.0:9464": false, "[::]:9464": false, "10.0.0.5:9464": false,
		"example.com:9464": false, "127.0.0.1": false, "": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
