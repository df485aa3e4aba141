package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestCIRunsTheReadmesTestCommand keeps .ci/run honest about what the
// README promises: CI runs the newcomer's test command as written, with
// nothing but the environment (CI, GORACE's exit pause) around it, and
// checks the memory ceiling without the race detector.
func TestCIRunsTheReadmesTestCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	ci := string(b)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^export CI=true$`),
		regexp.MustCompile(`(?m)^GORACE=atexit_sleep_ms=0 go test -race -short -vet=all \./\.\.\. \|\| status=\$\?$`),
		regexp.MustCompile(`(?m)^go test -short -count=1 -run '\^TestRunMemoryOfLargeEscalations\$' -v \./cmd/fulfiller/ `),
		regexp.MustCompile(`(?m)^exit \$status$`),
	} {
		if !want.MatchString(ci) {
			t.Errorf(".ci/run has no line matching %s", want)
		}
	}
}
