package suggest

import (
	"context"
	"log/slog"
	"time"

	"github.com/mewkit/fulfiller/policies/replay"
)

// Rego is what suggest needs of a Rego toolchain: it writes Rego, replays
// the log against it and runs its tests, but does not link the policy
// engine (OPA) itself (docs/design.md "Layout": dependencies point one
// way). cmd/fulfiller passes one made of package policies.
type Rego interface {
	// Format parses src, a Rego v1 module, and formats it as opa fmt
	// does; a module that does not parse is an error.
	Format(name string, src []byte) ([]byte, error)
	// RefKey reports whether name can be written as a ref's dotted key
	// (args.NAME) in Rego v1: an identifier that is no keyword.
	RefKey(name string) bool
	// Load loads a policy set (its .rego files and data documents) as
	// run and eval load one, each evaluation bounded by timeout; a policy
	// that does not load is an error naming its file.
	Load(ctx context.Context, p Policy, timeout time.Duration, log *slog.Logger) (replay.Decider, error)
	// Test runs the Rego unit tests in paths as opa test does. passed
	// counts the tests that passed; failures, when any test failed or
	// errored, is the report that says which and why ("" when all pass).
	Test(ctx context.Context, paths []string) (passed int, failures string, err error)
}
