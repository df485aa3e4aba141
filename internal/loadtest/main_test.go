package loadtest

import (
	"os"
	"testing"

	"github.com/mewkit/fulfiller/internal/testenv"
)

func TestMain(m *testing.M) {
	// The MCP runs over stdio start this test binary as their tool
	// server, race-built under go test -race: each would sleep a second
	// at its exit, which the run waits for.
	testenv.QuickRaceExits()
	os.Exit(m.Run())
}
