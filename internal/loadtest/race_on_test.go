//go:build race

package loadtest

// floodProposals is the flood test's size under the race detector, which
// slows this path about tenfold; the counts it checks do not depend on it.
const floodProposals = 4_000

// cpuProposals is the size of the runs whose CPU shares are checked: the
// race detector multiplies the CPU per proposal, so fewer give as many
// profile samples.
const cpuProposals = 1_000
