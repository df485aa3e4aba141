package teaminbox_test

import (
	"os"
	"testing"

	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// TestMain runs the browser tests four at a time on two cores
// (testenv.MoreParallel): each mostly waits on its page, which asks the
// inbox for its cards once a second, so that a card shows or leaves about
// half a second after it changed. It stops the one Chromium the browser
// tests open their tabs in (browsertest.PasskeyTab) once they are done.
func TestMain(m *testing.M) {
	testenv.MoreParallel()
	code := m.Run()
	browsertest.Stop()
	os.Exit(code)
}
