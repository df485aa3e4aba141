package state

import (
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
)

// The first definition seen of a tool is pinned; a later, different one
// is answered with the pinned digest (the front end then tells the
// policy the tool changed) until Accept replaces it. Two stores of one
// cluster share the pins (each fulfiller mcp on one --state, each member
// of a group), and of two pinning one tool at once, one digest wins for
// both.
func TestPinsKeepTheFirstDefinitionUntilAccepted(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			got, err := s.Pin(ctx, "fs", map[string]string{"read_file": "sha256:a", "write_file": "sha256:w"})
			if err != nil || !maps.Equal(got, map[string]string{"read_file": "sha256:a", "write_file": "sha256:w"}) {
				t.Fatalf("first Pin = %v, %v", got, err)
			}
			// A rug pull: read_file's definition changed; a new tool is pinned as it comes.
			got, err = s.Pin(ctx, "fs", map[string]string{"read_file": "sha256:b", "delete_path": "sha256:d"})
			if err != nil || !maps.Equal(got, map[string]string{"read_file": "sha256:a", "delete_path": "sha256:d"}) {
				t.Fatalf("Pin of a changed definition = %v, %v; want the pinned sha256:a", got, err)
			}
			// Another upstream's tool of the same name is its own.
			if got, err := s.Pin(ctx, "git", map[string]string{"read_file": "sha256:g"}); err != nil || got["read_file"] != "sha256:g" {
				t.Fatalf("Pin of git's read_file = %v, %v", got, err)
			}
			if err := s.Accept(ctx, "fs", map[string]string{"read_file": "sha256:b"}); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Pin(ctx, "fs", map[string]string{"read_file": "sha256:b"}); err != nil || got["read_file"] != "sha256:b" {
				t.Fatalf("Pin after Accept = %v, %v", got, err)
			}
			all, err := s.Pinned(ctx, "fs")
			if err != nil || !maps.Equal(all, map[string]string{"read_file": "sha256:b", "write_file": "sha256:w", "delete_path": "sha256:d"}) {
				t.Fatalf("Pinned(fs) = %v, %v", all, err)
			}
			if b.name != "cluster" {
				return
			}
			other := b.open(t, "m2")
			var wg sync.WaitGroup
			results := make([]map[string]string, 2)
			errs := make([]error, 2)
			for i, st := range []*Store{s, other} {
				wg.Go(func() {
					results[i], errs[i] = st.Pin(ctx, "new", map[string]string{"t": []string{"sha256:x", "sha256:y"}[i]})
				})
			}
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("two members pinning one tool at once: %v, %v", errs[0], errs[1])
			}
			if results[0]["t"] == "" || results[0]["t"] != results[1]["t"] {
				t.Errorf("two members pinning one tool at once: %v and %v, want one digest for both", results[0], results[1])
			}
			// An accept by one member reaches the other's pins in memory
			// (each call asks them, with no round trip).
			if got, err := other.Pin(ctx, "fs", map[string]string{"write_file": "sha256:w2"}); err != nil || got["write_file"] != "sha256:w" {
				t.Fatalf("other's pin of a changed write_file = %v, %v", got, err)
			}
			if err := s.Accept(ctx, "fs", map[string]string{"write_file": "sha256:w2"}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the other member sees the accepted definition", func() bool {
				got, err := other.Pin(ctx, "fs", map[string]string{"write_file": "sha256:w2"})
				return err == nil && got["write_file"] == "sha256:w2"
			})
		})
	}
}

// accept-tools runs in a process of its own, which never sees the
// upstream: what it accepts is what a fulfiller mcp on the same state
// directory last listed. A changed definition is told with its pin; one
// changed back is no change; a new tool is pinned, not a change; after
// Accept of the listed digests the pins are the listed definitions, and
// the front end's next call of the tool sees them at once.
func TestChangesAreWhatTheFrontEndLastListed(t *testing.T) {
	dir := t.TempDir()
	open := func(member string) *Store {
		t.Helper()
		s, err := Open(ctxT(t), Config{Mode: Mode{Kind: SharedDir, Dir: dir}, Space: "mcp", Member: member})
		if err != nil {
			t.Fatalf("Open %s: %v", member, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	front := open("mcp-1")
	ctx := ctxT(t)
	if _, err := front.Pin(ctx, "fs", map[string]string{"read_file": "sha256:r1", "write_file": "sha256:w1", "edit_file": "sha256:e1"}); err != nil {
		t.Fatal(err)
	}
	// Listed again: read_file changed, edit_file changed and changed back,
	// a new tool appeared.
	if _, err := front.Pin(ctx, "fs", map[string]string{"read_file": "sha256:r2", "edit_file": "sha256:e2", "new_tool": "sha256:n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := front.Pin(ctx, "fs", map[string]string{"edit_file": "sha256:e1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := front.Pin(ctx, "git", map[string]string{"git_status": "sha256:g1"}); err != nil {
		t.Fatal(err)
	}

	admin := open("mcp-accept-tools")
	got, err := admin.Changes(ctx, "fs")
	if want := map[string]ToolChange{"read_file": {Pinned: "sha256:r1", Listed: "sha256:r2"}}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("Changes(fs) = %v, %v; want %v", got, err, want)
	}
	if got, err := admin.Changes(ctx, "git"); err != nil || len(got) != 0 {
		t.Fatalf("Changes(git) = %v, %v; want none", got, err)
	}
	if got, err := admin.PinnedServers(ctx); err != nil || !slices.Equal(got, []string{"fs", "git"}) {
		t.Fatalf("PinnedServers = %v, %v", got, err)
	}
	if err := admin.Accept(ctx, "fs", map[string]string{"read_file": "sha256:r2"}); err != nil {
		t.Fatal(err)
	}
	if got, err := admin.Changes(ctx, "fs"); err != nil || len(got) != 0 {
		t.Fatalf("Changes(fs) after Accept = %v, %v; want none", got, err)
	}
	poll.Until(t, "the front end's next call sees the accepted definition", func() bool {
		got, err := front.Pin(ctx, "fs", map[string]string{"read_file": "sha256:r2"})
		return err == nil && got["read_file"] == "sha256:r2"
	})
}
