package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every `fulfiller SUBCOMMAND … --flag` written in the README and docs/
// names a flag that command has, and every other `--flag` the docs name
// is a flag of some command: a reader who copies a line gets what it
// says, not "unknown flag" (issue 42: --decision-log-mask and
// --state-url were written where the flags are --mask and --state).
func TestDocumentedFlagsExist(t *testing.T) {
	root := newRootCmd()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))

	// Every flag of every command, for flags written without one.
	anywhere := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { anywhere[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { anywhere[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if len(anywhere) < 20 {
		t.Fatalf("found %d flags on the commands: the walk reads nothing", len(anywhere))
	}

	flagRE := regexp.MustCompile(`(?:^|[\s\x60(\[])--([a-z][a-z0-9-]*[a-z0-9])`)
	checked := 0
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		for i, line := range logicalLines(string(raw)) {
			// A command line: `fulfiller SUB [SUB] … --flag …`.
			for _, cmdText := range commandsIn(line) {
				cmd, rest := resolve(root, cmdText)
				if cmd == nil {
					continue
				}
				for _, m := range flagRE.FindAllStringSubmatch(rest, -1) {
					checked++
					if !hasFlag(cmd, m[1]) {
						t.Errorf("%s, line %d: %q has no flag --%s (written: %s)", name, i+1, cmd.CommandPath(), m[1], clipLine(line))
					}
				}
			}
			for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
				if !anywhere[m[1]] && !notOurs(m[1], line) {
					t.Errorf("%s, line %d: no command has --%s (written: %s)", name, i+1, m[1], clipLine(line))
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d flags written with their command: the scan reads nothing", checked)
	}
}

// logicalLines joins shell continuations (a line ending in a backslash)
// and returns the lines, indexed as the first physical line of each.
func logicalLines(text string) []string {
	phys := strings.Split(text, "\n")
	out := make([]string, len(phys))
	for i := 0; i < len(phys); i++ {
		start := i
		line := phys[i]
		for strings.HasSuffix(strings.TrimRight(line, " "), "\\") && i+1 < len(phys) {
			i++
			line = strings.TrimSuffix(strings.TrimRight(line, " "), "\\") + " " + strings.TrimSpace(phys[i])
		}
		out[start] = line
	}
	return out
}

// commandsIn returns each `fulfiller …` command written in line, from
// the word after "fulfiller" to the end of its code span or line (a
// pipe, `;` or `&&` ends it too).
func commandsIn(line string) []string {
	var out []string
	for {
		i := strings.Index(line, "fulfiller ")
		if i < 0 {
			return out
		}
		// Not part of a longer word (fulfiller.state, ./fulfiller is
		// fine, mewkit/fulfiller/cmd is not a command).
		if i > 0 {
			prev := line[i-1]
			if prev != ' ' && prev != '`' && prev != '/' && prev != '(' && prev != '$' && prev != '\t' {
				line = line[i+len("fulfiller "):]
				continue
			}
			if prev == '/' && !strings.HasSuffix(line[:i], "./") && !strings.HasSuffix(line[:i], "bin/") {
				line = line[i+len("fulfiller "):]
				continue
			}
		}
		rest := line[i+len("fulfiller "):]
		end := len(rest)
		for _, stop := range []string{"`", " | ", "; ", " && ", " # "} {
			if j := strings.Index(rest, stop); j >= 0 && j < end {
				end = j
			}
		}
		out = append(out, rest[:end])
		line = rest[end:]
	}
}

// resolve finds the subcommand text names (its leading words) and
// returns it with the text after them; nil when the first word names no
// command of ours (prose: "fulfiller decides", "fulfiller is").
func resolve(root *cobra.Command, text string) (*cobra.Command, string) {
	words := strings.Fields(text)
	cmd := root
	n := 0
	for _, w := range words {
		var next *cobra.Command
		for _, sub := range cmd.Commands() {
			if sub.Name() == w || sub.HasAlias(w) {
				next = sub
			}
		}
		if next == nil {
			break
		}
		cmd = next
		n++
	}
	if n == 0 {
		return nil, "" // prose ("fulfiller decides"), or an argument ("--peer-fulfillers fulfiller")
	}
	return cmd, strings.Join(words[n:], " ")
}

func hasFlag(c *cobra.Command, name string) bool {
	for x := c; x != nil; x = x.Parent() {
		if x.Flags().Lookup(name) != nil || x.PersistentFlags().Lookup(name) != nil {
			return true
		}
	}
	return name == "help" || name == "version"
}

// notOurs: flags of other tools the docs quote (opa, go, npx, mew,
// systemd, kubectl, curl, openssl, claude, …), recognised by the tool
// named on the same line.
func notOurs(flag, line string) bool {
	switch flag {
	case "help", "version": // cobra's own, on every command
		return true
	case "experimental-websocket", "require", "from-file": // node's and kubectl's, quoted in real-mew.md and operations.md
		return true
	case "verification-key", "verification-key-id", "signing-alg", "scope": // opa's, in policies.md's table of the bundle flags' counterparts
		return true
	}
	for _, tool := range []string{"opa ", "opa's", "opa`", "as opa", "go ", "npx ", "npm ", "mew ", "systemd-analyze", "kubectl", "curl ", "openssl", "claude ", "chromium", "docker ", "git ", "nats", "helm ", "tmux", "goreleaser", "ko ", "apt-get", "--race", "-race", "mailpit", "pm2", "code --", "goose", "codex", "valgrind"} {
		if strings.Contains(line, tool) {
			return true
		}
	}
	return false
}

func clipLine(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}
