package policies

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatDiffHunks: changes far apart make separate hunks with three
// lines of context and diff -u's line numbers, so patch can apply them.
func TestFormatDiffHunks(t *testing.T) {
	var old, formatted []string
	for i := 1; i <= 20; i++ {
		line := "l" + strings.Repeat("x", i%3)
		old = append(old, line)
		if i == 2 || i == 15 {
			line = "CHANGED"
		}
		formatted = append(formatted, line)
	}
	got := FormatDiff("p.rego", []byte(strings.Join(old, "\n")+"\n"), []byte(strings.Join(formatted, "\n")+"\n"))
	want := "--- p.rego.orig\n+++ p.rego\n" +
		"@@ -1,5 +1,5 @@\n lx\n-lxx\n+CHANGED\n l\n lx\n lxx\n" +
		"@@ -12,7 +12,7 @@\n l\n lx\n lxx\n-l\n+CHANGED\n lx\n lxx\n l\n"
	if got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
	if d := FormatDiff("p.rego", []byte("a\n"), []byte("a\n")); d != "" {
		t.Errorf("no change: %q", d)
	}
}

// TestFormattedWriteThroughSymlink: -w rewrites the file a symlink points
// at and keeps the link and the file's permissions.
func TestFormattedWriteThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.rego")
	if err := os.WriteFile(real, []byte("package x\n\na:=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.rego")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	files, err := FormatFiles([]string{link})
	if err != nil || len(files) != 1 || !files[0].Changed() {
		t.Fatalf("FormatFiles = %+v, %v", files, err)
	}
	if err := files[0].Write(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(real); string(b) != "package x\n\na := 1\n" {
		t.Errorf("real file:\n%s", b)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link replaced: %v %v", info.Mode(), err)
	}
	if info, _ := os.Stat(real); info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", info.Mode())
	}
}

// RefKey says which names suggest may write as args.NAME: Rego v1
// identifiers that are no keyword.
func TestRefKey(t *testing.T) {
	for name, want := range map[string]bool{
		"path": true, "max_depth": true, "_x1": true,
		"if": false, "contains": false, "every": false, "in": false,
		"1st": false, "with-dash": false, "": false, "dotted.name": false, "naïve": false,
	} {
		if got := RefKey(name); got != want {
			t.Errorf("RefKey(%q) = %v, want %v", name, got, want)
		}
	}
}
