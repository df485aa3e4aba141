//go:build race

package loadtest

// floodProposals is the flood test's size under the race detector, which
// slows this path about tenfold; the counts it checks do not depend on it.
const floodProposals = 4_000

// cpuProposals is the size of the runs whose CPU shares are checked: the
// race detector multiplies the CPU per proposal (20-50 ms of the whole
// process, measured), so 400 give hundreds of 10 ms samples, more than the
// ~100 the run without it aims at, even when a busy machine loses half;
// the space and the tool, with 3-15% of them, still get several each.
const cpuProposals = 400
