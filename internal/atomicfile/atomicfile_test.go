package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// names are the entries of dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func fileIs(t *testing.T, path, content string, perm fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != content || fi.Mode().Perm() != perm {
		t.Errorf("%s: %q mode %v; want %q mode %v", filepath.Base(path), b, fi.Mode().Perm(), content, perm)
	}
}

// Write makes or replaces the file with its content and the mode asked
// (not masked by the umask), and leaves nothing else in the directory.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "main.rego")
	if err := Write(p, []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fileIs(t, p, "package a\n", 0o644)
	if err := Write(p, []byte("package b\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	fileIs(t, p, "package b\n", 0o640)
	if got := names(t, dir); !slices.Equal(got, []string{"main.rego"}) {
		t.Errorf("the directory holds %v; want only main.rego", got)
	}
}

// A write that cannot be renamed into place (a directory holds the
// name) fails, leaves what was there, and no temporary file.
func TestWriteFailsCleanly(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "taken")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "inside"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("data"), 0o600); err == nil {
		t.Fatal("Write over a directory that holds a file: no error")
	}
	if got := names(t, dir); !slices.Equal(got, []string{"taken"}) {
		t.Errorf("after the failed write the directory holds %v; want only taken", got)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("data"), 0o600); err == nil {
		t.Fatal("Write into a directory that does not exist: no error")
	}
}

// Create makes the file once: a second Create leaves the first's
// content, says it made nothing, and neither leaves a temporary file.
func TestCreate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	made, err := Create(p, []byte("first\n"), 0o600)
	if err != nil || !made {
		t.Fatalf("Create: made %v, %v; want made", made, err)
	}
	made, err = Create(p, []byte("second\n"), 0o600)
	if err != nil || made {
		t.Fatalf("Create again: made %v, %v; want not made, no error", made, err)
	}
	fileIs(t, p, "first\n", 0o600)
	if got := names(t, dir); !slices.Equal(got, []string{"token"}) {
		t.Errorf("the directory holds %v; want only token", got)
	}
	if _, err := Create(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("Create in a directory that does not exist: no error")
	}
}
