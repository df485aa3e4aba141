//go:build !race

package loadtest

// floodProposals is the flood test's size: big enough that the fulfiller's
// pending store fills and busy rejects happen, small enough for CI.
const floodProposals = 20_000

// cpuProposals is the size of the runs whose CPU shares are checked:
// enough CPU for ~100 profile samples (10 ms each) on an idle machine, so
// that every component has some.
const cpuProposals = 3_000
