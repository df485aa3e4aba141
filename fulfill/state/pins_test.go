package state

import (
	"maps"
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
