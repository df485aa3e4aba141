//go:build !race

package loadtest

// floodProposals is the flood test's size: big enough that the fulfiller's
// pending store fills and busy rejects happen, small enough for CI.
const floodProposals = 20_000
