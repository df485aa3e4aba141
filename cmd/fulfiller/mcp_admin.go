package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/examples"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/atomicfile"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/printable"
)

// mcpAdminCommands are the `fulfiller mcp` subcommands that manage the
// front end's files rather than run it.
func mcpAdminCommands() []*cobra.Command {
	return []*cobra.Command{newMCPInitCmd(), newMCPAcceptToolsCmd()}
}

func newMCPInitCmd() *cobra.Command {
	var roots []string
	var force bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Write a starter policy for fulfiller mcp on a developer's machine",
		Long: `init writes the starter policy (examples/mcp/policies, with its tests) to
$XDG_CONFIG_HOME/fulfiller/policies and its data to
$XDG_CONFIG_HOME/fulfiller/data.yaml (~/.config/fulfiller without
XDG_CONFIG_HOME): where fulfiller mcp reads its --policy and --data by
default. The data names the working trees (--root, repeatable; default the
working directory), absolute, and your home directory.

The policy: reads and writes inside the working trees run; deletes, pushes,
a tool whose definition changed since it was pinned, and anything outside
the trees ask you (@caller); secrets (.env, ~/.ssh, *.pem, id_rsa,
credentials…) and tools it does not know are refused, with a message the
model can act on. docs/mcp.md explains it and how to tune it in data.yaml.

init never overwrites a file without --force (which rewrites the files it
writes and leaves any other file alone). Exit 0 when written, 2 when a file
exists or a --root is not a directory, 1 when a file cannot be written.`,
		Example: `  fulfiller mcp init
  fulfiller mcp init --root ~/src/app --root ~/src/lib
  fulfiller mcp init --force     # the starter policy again, over your edits`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := workspaceRoots(roots)
			if err != nil {
				return err
			}
			home, err := os.UserHomeDir()
			if err != nil {
				home = "" // no home: "~" stays unexpanded, and such paths are refused as relative
			}
			dir := mcpConfigDir()
			written, err := writeStarter(dir, abs, home, force)
			if err != nil {
				return err
			}
			return printStarter(cmd.OutOrStdout(), dir, written, abs)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&roots, "root", nil, "a working tree `DIR` whose files the agent may read and write without asking (repeatable; default the working directory)")
	f.BoolVar(&force, "force", false, "overwrite the starter policy's files where they exist (your other files are left alone)")
	return cmd
}

// workspaceRoots returns the --root directories absolute and cleaned,
// each followed by its real path where a symbolic link makes that
// another (the filesystem server reports and checks real paths, so an
// agent may write either); the working directory when none is given.
func workspaceRoots(given []string) ([]string, error) {
	if len(given) == 0 {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("the working directory, the default --root: %w", err)
		}
		given = []string{wd}
	}
	var out []string
	for _, r := range given {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, usageErrorf("--root %s: %v", r, err)
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fileError("--root", err)
		}
		if !fi.IsDir() {
			return nil, usageErrorf("--root %s: not a directory", r)
		}
		out = appendNew(out, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			out = appendNew(out, real)
		}
	}
	return out, nil
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// writeStarter writes the starter policy to dir/policies and its data
// to dir/data.yaml and returns the paths written, in order. Without
// force it writes nothing when any of them exists. Each file is written
// aside and renamed into place, so that a fulfiller mcp reloading the
// directory never reads half a file.
func writeStarter(dir string, roots []string, home string, force bool) ([]string, error) {
	files := map[string][]byte{}
	var order []string
	err := fs.WalkDir(examples.MCP, "mcp/policies", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := examples.MCP.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, "policies", path.Base(p))
		files[dst] = b
		order = append(order, dst)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the embedded starter policy: %w", err)
	}
	data, err := examples.MCPData(roots, home)
	if err != nil {
		return nil, fmt.Errorf("read the embedded starter data: %w", err)
	}
	dataPath := filepath.Join(dir, "data.yaml")
	files[dataPath] = data
	order = append(order, dataPath)

	if !force {
		for _, p := range order {
			if _, err := os.Lstat(p); err == nil {
				return nil, usageErrorf("%s exists: fulfiller mcp init overwrites nothing without --force", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fileError("init", err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o755); err != nil {
		return nil, fmt.Errorf("mcp init: %w", err)
	}
	for _, p := range order {
		// Aside, then renamed: a policy loader watching the directory
		// (a running fulfiller mcp) never reads a file half-written.
		if err := atomicfile.Write(p, files[p], 0o644); err != nil {
			return nil, fmt.Errorf("mcp init: write %s: %w", p, err)
		}
	}
	return order, nil
}

// printStarter says what init wrote and what to run next.
func printStarter(w io.Writer, dir string, written, roots []string) error {
	for _, p := range written {
		fmt.Fprintf(w, "wrote %s\n", p)
	}
	fmt.Fprintf(w, "working trees: %s\n", strings.Join(roots, ", "))
	fmt.Fprintf(w, "\nnext: check it, then put fulfiller in front of a server in your client, e.g. Claude Code's\n")
	fmt.Fprintf(w, "  fulfiller test %s %s\n", shellQuote(filepath.Join(dir, "policies")), shellQuote(filepath.Join(dir, "data.yaml")))
	quoted := make([]string, len(roots))
	for i, r := range roots {
		quoted[i] = shellQuote(r)
	}
	fmt.Fprintf(w, "  claude mcp add fs -- fulfiller mcp --name fs -- npx -y @modelcontextprotocol/server-filesystem %s\n", strings.Join(quoted, " "))
	_, err := fmt.Fprintln(w, "(docs/mcp.md has the set-ups of VS Code, Cursor, Codex and goose)")
	return err
}

// shellQuote quotes s for a POSIX shell where it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func newMCPAcceptToolsCmd() *cobra.Command {
	var spec, creds string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "accept-tools NAME",
		Short: "Accept an upstream's changed tool definitions as pinned",
		Long: `fulfiller mcp pins the tool definitions it first sees of each upstream (its
name, description, input schema and annotations: a digest per tool). When an
upstream later lists a different definition — a description or schema
changed under you — calls of that tool carry input.tool.changed, and the
starter policy asks you about each of them. accept-tools NAME records the
definitions upstream NAME last listed (to any fulfiller mcp on this --state)
as its pins, and prints what changed: each tool with its old and new digest.

It works while fulfiller mcp runs on the same --state (they share the
store), and the running ones see the accepted definitions at once.

Exit 0 when accepted (or nothing had changed), 2 when no upstream NAME has
tools pinned in --state, 1 when the store cannot be reached.`,
		Example: `  fulfiller mcp accept-tools fs
  fulfiller mcp accept-tools fs --dry-run
  fulfiller mcp accept-tools github --state /srv/fulfiller/state`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("name the one upstream whose tools to accept (its --name, or its NAME in --upstream)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if spec == "" {
				spec = mcpStateDir()
			}
			m, err := state.ParseMode(spec)
			if err != nil {
				return usageErrorf("--state %v", err)
			}
			switch m.Kind {
			case state.Memory:
				return usageErrorf("--state memory keeps no pins: name the --state fulfiller mcp uses")
			case state.Dir:
				// The directory a running fulfiller mcp may hold: shared.
				if _, err := os.Stat(m.Dir); errors.Is(err, fs.ErrNotExist) {
					return usageErrorf("--state %s: no such directory: no fulfiller mcp has pinned tools there", m.Dir)
				}
				m.Kind = state.SharedDir
			}
			if creds != "" && m.Kind != state.External {
				return usageErrorf("--state-creds is only for a nats:// or tls:// --state, not %s", m)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, err := state.Open(ctx, state.Config{Mode: m, Creds: creds, Space: mcpserve.StoreSpace, Member: fmt.Sprintf("mcp-accept-tools-%d", os.Getpid())})
			if err != nil {
				return fmt.Errorf("mcp accept-tools: open --state %s: %w", m, err)
			}
			defer st.Close()
			return acceptTools(ctx, cmd.OutOrStdout(), st, args[0], dryRun)
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec, "state", "", "the store fulfiller mcp keeps its pins in, as given to it: a `DIR` (default $XDG_STATE_HOME/fulfiller), or nats://host:4222[,…] / tls://…")
	f.StringVar(&creds, "state-creds", "", "NATS credentials `FILE` for a nats:// or tls:// --state")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be accepted, and accept nothing")
	return cmd
}

// toolPins is what acceptTools needs of the store.
type toolPins interface {
	Pinned(ctx context.Context, server string) (map[string]string, error)
	PinnedServers(ctx context.Context) ([]string, error)
	Changes(ctx context.Context, server string) (map[string]state.ToolChange, error)
	Accept(ctx context.Context, server string, digests map[string]string) error
}

// acceptTools accepts server's changed definitions and prints them.
func acceptTools(ctx context.Context, w io.Writer, st toolPins, server string, dryRun bool) error {
	pinned, err := st.Pinned(ctx, server)
	if err != nil {
		return fmt.Errorf("mcp accept-tools: %w", err)
	}
	if len(pinned) == 0 {
		known, err := st.PinnedServers(ctx)
		if err != nil {
			return fmt.Errorf("mcp accept-tools: %w", err)
		}
		names := "none"
		if len(known) > 0 {
			names = printable.String(strings.Join(known, ", "))
		}
		return usageErrorf("no upstream named %s has tools pinned here (upstreams with pins: %s)", printable.String(server), names)
	}
	changes, err := st.Changes(ctx, server)
	if err != nil {
		return fmt.Errorf("mcp accept-tools: %w", err)
	}
	if len(changes) == 0 {
		_, err := fmt.Fprintf(w, "%s: no tool definition changed since it was pinned (%d tools pinned); nothing to accept\n", printable.String(server), len(pinned))
		return err
	}
	accept := make(map[string]string, len(changes))
	for name, c := range changes {
		accept[name] = c.Listed
	}
	verb := "accepted"
	if dryRun {
		verb = "would accept (--dry-run)"
	} else if err := st.Accept(ctx, server, accept); err != nil {
		return fmt.Errorf("mcp accept-tools: %w", err)
	}
	fmt.Fprintf(w, "%s: %s %d changed tool definitions\n", printable.String(server), verb, len(changes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tPINNED\tNOW")
	for _, name := range slices.Sorted(maps.Keys(changes)) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printable.String(name), printable.String(changes[name].Pinned), printable.String(changes[name].Listed))
	}
	return tw.Flush()
}
