//go:build race

package state

// raceEnabled: the race detector slows the embedded server ~10x.
const raceEnabled = true
