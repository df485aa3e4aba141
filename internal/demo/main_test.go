package demo

import (
	"os"
	"testing"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// TestMain runs four demos at a time on two cores (testenv.MoreParallel):
// a demo mostly waits on its story's pauses (the person's 3s at step 9,
// the reminder and escalation of step 15), and at go test's default two
// of TestDemoInteractiveAnswersEveryCard's four ways ran at a time.
func TestMain(m *testing.M) {
	testenv.MoreParallel()
	os.Exit(m.Run())
}
