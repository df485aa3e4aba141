//go:build race

package loadtest

// floodProposals is the flood test's size under the race detector, which
// slows this path about tenfold; the counts it checks do not depend on it.
const floodProposals = 4_000
