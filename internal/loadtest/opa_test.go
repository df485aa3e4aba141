package loadtest

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// opaForTest finds an opa binary without building one (a build takes
// minutes): $FULFILLER_TEST_OPA_BIN, or the copy `fulfiller bench
// --vs-opa-server` leaves in the user cache.
func opaForTest(t *testing.T) string {
	if bin := os.Getenv("FULFILLER_TEST_OPA_BIN"); bin != "" {
		return bin
	}
	if dir, err := os.UserCacheDir(); err == nil {
		bin := filepath.Join(dir, "fulfiller", "opa-"+OPAVersion(), "opa")
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	testenv.Missing(t, "no opa binary: set FULFILLER_TEST_OPA_BIN or run fulfiller bench --vs-opa-server once")
	return ""
}

// The OPA server, given the same files, makes the same decision as the
// embedded engine on every input the fulfiller decided, and it is gone
// when the comparison returns.
//
// It is skipped with -short, and so in CI: it needs an opa binary, which
// CI would have to build (minutes of a fresh 2-core machine) for this one
// test of bench --vs-opa-server, a benchmark's comparison. The engine it
// compares with is the same OPA version, embedded; what the fulfiller adds
// on the way in, its own JSON parsing, is checked against OPA's in every
// run (FuzzJSONToValue's seeds, policies' input tests).
func TestCompareOPAAgreesAndStopsTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark comparison with an OPA server binary; go test without -short runs it (FULFILLER_TEST_OPA_BIN or fulfiller bench --vs-opa-server once)")
	}
	bin := opaForTest(t)
	res, err := Run(t.Context(), Config{
		Policies: []string{"../../examples/policies"}, Data: []string{"../../examples/policies/data.yaml"},
		Proposers: 2, Proposals: 400, CaptureInputs: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Inputs) != 100 {
		t.Fatalf("captured %d inputs, want 100", len(res.Inputs))
	}
	files := res.Engine.Files()
	c, err := CompareOPA(t.Context(), res.Engine, res.Inputs, OPAOptions{Bin: bin, Decisions: 200, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.Agree != 100 || c.Disagree != 0 {
		t.Fatalf("agree %d, disagree %d (%s); want 100, 0", c.Agree, c.Disagree, c.Example)
	}
	if c.Embedded.PerSecond <= 0 || c.Server.PerSecond <= 0 || c.P50Ratio <= 0 {
		t.Errorf("comparison has empty figures: %+v", c)
	}
	// The server is stopped: a new one on the same files starts, and the
	// old address no longer answers.
	srv, err := startOPA(t.Context(), bin, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.stop()
	client := &http.Client{Timeout: time.Second}
	if resp, err := client.Get(srv.url + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("OPA at %s still answers after stop", srv.url)
	}
}
