package policies

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/logbuf"
)

// writeTree writes files (relative path → content) under a new temporary
// directory and returns it.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	return dir
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// evalTimeout replaces the 100 ms production evaluation timeout in tests
// that assert what a policy decides: under -race on a loaded CI machine an
// evaluation can take longer, and failing closed there would be a flake,
// not a finding. The timeout itself is tested with its own, small values.
const evalTimeout = time.Minute

// loadInline loads one policy given as source.
func loadInline(t testing.TB, src string) *Engine {
	t.Helper()
	dir := writeTree(t, map[string]string{"policy.rego": src})
	e, err := Load(t.Context(), Options{Timeout: evalTimeout, Policies: []string{dir}, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return e
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// logBuffer is a log sink safe to read while it is written.
type logBuffer = logbuf.Buffer

func textLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// examples are the example policies and their data, relative to this
// package.
var examples = Options{
	Policies: []string{"../examples/policies"},
	Data:     []string{"../examples/policies/data.yaml"},
}

func loadExamples(t testing.TB) *Engine {
	t.Helper()
	opts := examples
	opts.Logger = quietLogger()
	opts.Timeout = evalTimeout
	e, err := Load(t.Context(), opts)
	if err != nil {
		t.Fatalf("Load examples: %v", err)
	}
	return e
}
