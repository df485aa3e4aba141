package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readme is the repository's README.md, its lines joined by spaces so
// that a phrase may wrap.
func readme(t *testing.T) (raw, text string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), strings.Join(strings.Fields(string(b)), " ")
}

// TestReadmeForNewcomers checks what a newcomer reading the README found
// wrong or missing (issue 42): two set-up commands and no more, how long
// the tests take and what they download, a way to build that works from
// a clone before the module is published, the words MCP, elicitation and
// JetStream explained where they first appear, and no claims the binary
// has outgrown.
func TestReadmeForNewcomers(t *testing.T) {
	raw, text := readme(t)
	// "Try it": exactly the two commands.
	try := raw[strings.Index(raw, "## Try it"):]
	try = try[:strings.Index(try[3:], "\n## ")+3]
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(try)
	if block == nil {
		t.Fatal("## Try it has no sh block")
	}
	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		cmds = append(cmds, strings.TrimSpace(strings.SplitN(line, "#", 2)[0]))
	}
	if want := []string{"go run ./cmd/fulfiller demo", "go test -race -short -vet=all ./..."}; strings.Join(cmds, "\n") != strings.Join(want, "\n") {
		t.Errorf("## Try it's commands are %q, want %q", cmds, want)
	}
	for _, want := range []string{
		// The test command: how long, and what it downloads.
		"`.ci/run` is done with the tests about 5 minutes after it",
		"downloads about 60 modules more that only tests use",
		// Building from a clone comes first; go install @latest waits
		// for the module to be published.
		"go build -o fulfiller ./cmd/fulfiller",
		"The module is not published yet",
		// demo --hold prints a go run line, as the README's newcomer
		// used go run.
		"as a `go run` line to paste in a second terminal",
		"FULFILLER_TOKEN=fulfiller-token go run ./cmd/fulfiller run --gateway",
		// What the interactive demo asks of the person.
		"every request to her",
		// JetStream in words, at its first mention.
		"is the persistence layer of the NATS messaging server",
		// Elicitation in words.
		"the way MCP lets a server ask the person behind a client a question",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README lacks %q", want)
		}
	}
	// MCP is linked and expanded where it first appears.
	if i := strings.Index(text, "MCP"); !strings.HasPrefix(text[i-1:], "[MCP](https://modelcontextprotocol.io) (Model Context Protocol") {
		t.Errorf("the first MCP is not linked and expanded: %q", text[max(i-40, 0):i+80])
	}
	// "A team, on phones" shows the team inbox (inbox serve), not
	// approve --web's page.
	team := text[strings.Index(text, "**A team, on phones.**"):]
	team = team[:strings.Index(team, "## Documentation")]
	if !strings.Contains(team, "docs/images/team-inbox-phone.png") || strings.Contains(team, "docs/images/inbox-phone.png") {
		t.Errorf("A team, on phones shows the wrong pictures: %s", team)
	}
	for _, stale := range []string{
		"being wired into `run`",
		"the production delete waits for you",
	} {
		if strings.Contains(text, stale) {
			t.Errorf("README still says %q", stale)
		}
	}
	// go install …@latest is never the first way to get the binary.
	if i, j := strings.Index(raw, "cmd/fulfiller@latest"), strings.Index(raw, "go build -o fulfiller ./cmd/fulfiller"); i >= 0 && i < j {
		t.Error("README offers go install …@latest before building from the clone")
	}
}
