package testenv

import (
	"os"
	"strings"
)

// QuickRaceExits makes the race-built processes a test binary starts
// (itself again, as fulfiller or nats-server) exit as soon as they are
// done. A binary built with -race sleeps for ThreadSanitizer's
// atexit_sleep_ms, one second by default, at every clean exit, in case
// another thread is about to race: cmd/fulfiller's tests wait for about
// a hundred such exits, 22 of their 113 seconds. Races are still
// reported as they happen, and a child that raced still exits 66.
//
// A package's TestMain calls it before m.Run. It sets GORACE in the test
// binary's own environment, which its children inherit; the test binary
// itself already read GORACE when it started. An atexit_sleep_ms the
// caller gave in GORACE is kept.
func QuickRaceExits() {
	gorace := os.Getenv("GORACE")
	if strings.Contains(gorace, "atexit_sleep_ms") {
		return
	}
	_ = os.Setenv("GORACE", strings.TrimSpace(gorace+" atexit_sleep_ms=0"))
}
