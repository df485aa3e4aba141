package loadtest

import (
	"bufio"
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Percentiles summarise a set of latencies. JSON gives microseconds, so
// that scripts need no duration parser. The load run's come from a
// histogram (within 0.4%, max exact); the OPA comparison's are exact.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	Max   float64 `json:"max_us"`
}

// summarise sorts ns in place and reads the nearest-rank percentiles.
func summarise(ns []int64) Percentiles {
	if len(ns) == 0 {
		return Percentiles{}
	}
	slices.Sort(ns)
	at := func(q float64) float64 {
		i := int(q*float64(len(ns))+0.5) - 1
		i = min(max(i, 0), len(ns)-1)
		return float64(ns[i]) / 1e3
	}
	return Percentiles{Count: len(ns), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: float64(ns[len(ns)-1]) / 1e3}
}

// us turns microseconds back into a Duration for printing.
func us(v float64) time.Duration { return time.Duration(v * 1e3) }

// peakRSS reads the process's high-water mark of resident memory
// (VmHWM), in bytes; 0 where /proc is not available.
// memoryLimit is the runtime's soft memory limit, 0 for none.
func memoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}

func peakRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // "123456 kB"
		if len(fields) == 0 {
			return 0
		}
		kb, _ := strconv.ParseUint(fields[0], 10, 64)
		return kb << 10
	}
	return 0
}

// heapSampler records the largest live heap (bytes in heap objects) it
// sees. The runtime keeps no heap high-water mark, so it samples: short
// spikes between samples can be missed, which the report says.
type heapSampler struct {
	peak atomic.Uint64
	stop context.CancelFunc
	wg   sync.WaitGroup
}

const heapMetric = "/memory/classes/heap/objects:bytes"

func startHeapSampler(ctx context.Context, every time.Duration) *heapSampler {
	ctx, cancel := context.WithCancel(ctx)
	h := &heapSampler{stop: cancel}
	h.sample()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				h.sample()
			}
		}
	}()
	return h
}

// heapNow reads the live heap without stopping the world.
func heapNow() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func (h *heapSampler) sample() {
	v := heapNow()
	for {
		old := h.peak.Load()
		if v <= old || h.peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// Close stops sampling and returns the peak.
func (h *heapSampler) Close() uint64 {
	h.stop()
	h.wg.Wait()
	h.sample()
	return h.peak.Load()
}
