package teaminbox_test

import (
	"os"
	"testing"

	"github.com/mewkit/fulfiller/internal/browsertest"
)

// TestMain stops the one Chromium the browser tests open their tabs in
// (browsertest.PasskeyTab) once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	browsertest.Stop()
	os.Exit(code)
}
