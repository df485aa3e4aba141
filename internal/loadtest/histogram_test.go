package loadtest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHistogramMatchesExactPercentiles: over latencies spread from
// microseconds to seconds, the histogram's p50/p90/p99 are within 0.4% of
// the exact nearest-rank ones and its max is exact; small values are exact.
func TestHistogramMatchesExactPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 1000, 100_000} {
		var h, a, b histogram
		exact := make([]int64, n)
		for i := range exact {
			v := int64(math.Exp(rng.Float64()*math.Log(5e9))) + rng.Int64N(50) // 1 ns .. 5 s, log-spread
			exact[i] = v
			h.record(v)
			if i%2 == 0 { // merging two halves must give the same as one histogram
				a.record(v)
			} else {
				b.record(v)
			}
		}
		a.merge(&b)
		want := summarise(exact)
		for _, got := range []Percentiles{h.percentiles(), a.percentiles()} {
			if got.Count != want.Count || got.Max != want.Max {
				t.Fatalf("n=%d: count/max %d/%v, want %d/%v", n, got.Count, got.Max, want.Count, want.Max)
			}
			for _, p := range [][2]float64{{got.P50, want.P50}, {got.P90, want.P90}, {got.P99, want.P99}} {
				if math.Abs(p[0]-p[1]) > 0.004*p[1]+0.001 {
					t.Errorf("n=%d: percentile %v, exact %v", n, p[0], p[1])
				}
			}
		}
	}
	var h histogram
	for _, v := range []int64{3, 5, 100} {
		h.record(v)
	}
	if got := h.percentiles(); got.P50 != 0.005 || got.Max != 0.1 {
		t.Errorf("small values: %+v, want exact p50 5ns and max 100ns", got)
	}
}

// TestHistogramBucketsAreContiguous: every value falls in exactly one
// bucket whose midpoint is within 0.4% of it, and buckets never go back.
func TestHistogramBucketsAreContiguous(t *testing.T) {
	prev := -1
	for _, v := range []int64{0, 1, 127, 128, 129, 255, 256, 257, 511, 512, 1e3, 1e6, 123456789, 1e12, math.MaxInt64} {
		i := bucket(v)
		if i < prev || i >= histBuckets {
			t.Fatalf("bucket(%d) = %d after %d", v, i, prev)
		}
		prev = i
		if mid := bucketMid(i); math.Abs(float64(mid-v)) > 0.004*float64(v)+0.5 {
			t.Errorf("bucket(%d) = %d, midpoint %d", v, i, mid)
		}
	}
}
