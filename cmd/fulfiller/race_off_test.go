//go:build !race

package main

// raceEnabled: the race detector multiplies memory, so memory ceilings
// are checked only without it.
const raceEnabled = false
