package state

import (
	"errors"
	"testing"
	"time"
)

// Grants are created once per id, listed (in a cluster, by every member
// of the group), revoked once (a second revoke is harmless), and a grant
// that cannot match anything any more is not stored.
func TestGrants(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			a, other := b.open(t, "m1"), (*Store)(nil)
			if b.name == "cluster" {
				other = b.open(t, "m2") // a group's other member
			} else {
				other = a // an embedded store is one process's
			}
			ctx := ctxT(t)
			g := &Grant{ID: "g-1", Expires: time.Now().Add(time.Hour), Doc: []byte(`{"tool":"read_file"}`)}
			if err := a.PutGrant(ctx, g); err != nil {
				t.Fatal(err)
			}
			if g.StoreRevision == 0 {
				t.Error("PutGrant left StoreRevision 0")
			}
			if err := a.PutGrant(ctx, &Grant{ID: "g-1", Expires: time.Now().Add(time.Hour), Doc: []byte(`{"tool":"delete_path"}`)}); !errors.Is(err, ErrExists) {
				t.Fatalf("second grant under one id = %v, want ErrExists", err)
			}
			gs, err := other.Grants(ctx) // the other member sees it
			if err != nil || len(gs) != 1 || gs[0].ID != "g-1" || string(gs[0].Doc) != `{"tool":"read_file"}` || gs[0].Revoked {
				t.Fatalf("Grants = %+v, %v", gs, err)
			}
			r, err := other.RevokeGrant(ctx, "g-1")
			if err != nil || !r.Revoked || string(r.Doc) != `{"tool":"read_file"}` {
				t.Fatalf("RevokeGrant = %+v, %v", r, err)
			}
			if r, err := a.RevokeGrant(ctx, "g-1"); err != nil || !r.Revoked {
				t.Fatalf("second RevokeGrant = %+v, %v", r, err)
			}
			if gs, err := a.Grants(ctx); err != nil || len(gs) != 1 || !gs[0].Revoked {
				t.Fatalf("Grants after revoke = %+v, %v", gs, err)
			}
			if _, err := a.RevokeGrant(ctx, "nope"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("RevokeGrant(unknown) = %v, want ErrNotFound", err)
			}
			if err := a.PutGrant(ctx, &Grant{ID: "old", Expires: time.Now().Add(-48 * time.Hour)}); err == nil {
				t.Error("a grant long expired was stored")
			}
			if err := a.PutGrant(ctx, &Grant{ID: "", Expires: time.Now().Add(time.Hour)}); err == nil {
				t.Error("a grant without an id was stored")
			}
		})
	}
}

// A watch sees the stored grants, then Current, then every change made by
// any member: a new grant and a revocation.
func TestWatchGrants(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			a := b.open(t, "m1")
			other := a
			if b.name == "cluster" {
				other = b.open(t, "m2")
			}
			ctx := ctxT(t)
			exp := time.Now().Add(time.Hour)
			if err := a.PutGrant(ctx, &Grant{ID: "g-1", Expires: exp, Doc: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			ch, err := a.WatchGrants(ctx)
			if err != nil {
				t.Fatal(err)
			}
			next := func() GrantChange {
				t.Helper()
				select {
				case c, ok := <-ch:
					if !ok {
						t.Fatal("watch ended")
					}
					return c
				case <-ctx.Done():
					t.Fatal("no grant event")
				}
				return GrantChange{}
			}
			if c := next(); c.Grant == nil || c.Grant.ID != "g-1" {
				t.Fatalf("first event %+v, want g-1", c)
			}
			if c := next(); !c.Current {
				t.Fatalf("second event %+v, want Current", c)
			}
			if err := other.PutGrant(ctx, &Grant{ID: "g-2", Expires: exp, Doc: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			if c := next(); c.Grant == nil || c.Grant.ID != "g-2" || c.Grant.Revoked {
				t.Fatalf("event %+v, want g-2 created", c)
			}
			if _, err := other.RevokeGrant(ctx, "g-1"); err != nil {
				t.Fatal(err)
			}
			if c := next(); c.Grant == nil || c.Grant.ID != "g-1" || !c.Grant.Revoked {
				t.Fatalf("event %+v, want g-1 revoked", c)
			}
		})
	}
}
