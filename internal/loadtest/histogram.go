package loadtest

import "math/bits"

// histSubBits sets the histogram's precision: 2^histSubBits buckets per
// power of two, so a bucket is at most 1/128 of its values wide and its
// midpoint is within 0.4% of any value in it.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histBuckets = 64 * histSub
)

// histogram counts latencies (ns) in log-linear buckets. It takes the
// same 64 KiB whatever the number of proposals, so that the peak RSS a
// million-proposal flood reports is the fulfiller's, not the bench's own
// record of a million samples. Percentiles read from it are within 0.4%
// of the exact ones; the maximum is exact.
type histogram struct {
	counts [histBuckets]uint64
	n      int
	max    int64
}

// bucket is the index of the bucket holding v: values below histSub
// exactly, above that histSub buckets for each power of two.
func bucket(v int64) int {
	if v < histSub {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1 // v>>shift is in [histSub, 2*histSub)
	return histSub*(shift+1) + int(v>>shift) - histSub
}

// bucketMid is the midpoint of bucket i's values.
func bucketMid(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	lo := int64(i%histSub+histSub) << shift
	hi := lo + int64(1)<<shift - 1
	return lo + (hi-lo)/2
}

// record counts one latency.
func (h *histogram) record(ns int64) {
	h.counts[bucket(ns)]++
	h.n++
	h.max = max(h.max, ns)
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// percentiles reads the nearest-rank p50, p90 and p99, as summarise does
// for a sorted slice.
func (h *histogram) percentiles() Percentiles {
	if h.n == 0 {
		return Percentiles{}
	}
	at := func(q float64) float64 {
		rank := uint64(min(max(int(q*float64(h.n)+0.5), 1), h.n))
		var seen uint64
		for i, c := range h.counts {
			if seen += c; seen >= rank {
				return float64(min(bucketMid(i), h.max)) / 1e3
			}
		}
		return float64(h.max) / 1e3
	}
	return Percentiles{Count: h.n, P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: float64(h.max) / 1e3}
}
