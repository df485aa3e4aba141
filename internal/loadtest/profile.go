package loadtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
)

// LabelKey is the pprof label that says which part of the bench a
// goroutine belongs to; its values are the Component* constants. A CPU
// profile of a run (bench --cpuprofile) can be cut by it, e.g.
// `go tool pprof -tagfocus component=fulfiller -top FILE`.
const LabelKey = "component"

// Values of LabelKey. Goroutines inherit their creator's labels, so
// labelling the goroutine that dials a participant or starts a component
// labels everything that component starts: the fulfiller's agent
// supervisor, reader and pinger, its decide workers, elicit, and the
// embedded NATS server of its state store.
const (
	ComponentFulfiller = "fulfiller"
	ComponentSpace     = "space"
	ComponentTool      = "tool"
	ComponentProposers = "proposers"
	// ComponentOther is CPU in no labelled goroutine: the Go runtime's
	// own (GC background marking, the scheduler, timer callbacks), the
	// bench's driver loop and heap sampler.
	ComponentOther = "other"
)

// labelled runs f with goroutine label component, so that the goroutines
// f starts carry it too.
func labelled(ctx context.Context, component string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(LabelKey, component), f)
}

// cpuByLabel sums the CPU time of a runtime/pprof CPU profile by the
// value of one label. Samples without it are summed under "". It reads the
// profile.proto wire format directly (only the fields it needs), so the
// bench needs no profile library.
func cpuByLabel(prof []byte, key string) (map[string]int64, error) {
	if len(prof) >= 2 && prof[0] == 0x1f && prof[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(prof))
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if prof, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	type label struct{ key, str int64 }
	type sample struct {
		values []int64
		labels []label
	}
	var (
		types   [][2]int64 // sample_type: (type, unit) string indices
		samples []sample
		strs    []string
	)
	// Profile: 1 sample_type, 2 sample, 6 string_table.
	err := protoFields(prof, func(num int, wire int, v uint64, b []byte) error {
		switch {
		case num == 1 && wire == 2:
			var vt [2]int64
			err := protoFields(b, func(n, w int, v uint64, _ []byte) error {
				if w == 0 && (n == 1 || n == 2) {
					vt[n-1] = int64(v)
				}
				return nil
			})
			types = append(types, vt)
			return err
		case num == 2 && wire == 2:
			var s sample
			err := protoFields(b, func(n, w int, v uint64, b []byte) error {
				switch {
				case n == 2 && w == 0:
					s.values = append(s.values, int64(v))
				case n == 2 && w == 2: // packed
					vs, err := packedVarints(b)
					s.values = append(s.values, vs...)
					return err
				case n == 3 && w == 2:
					var l label
					err := protoFields(b, func(n, w int, v uint64, _ []byte) error {
						if w == 0 && n == 1 {
							l.key = int64(v)
						} else if w == 0 && n == 2 {
							l.str = int64(v)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case num == 6 && wire == 2:
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || i >= int64(len(strs)) {
			return ""
		}
		return strs[i]
	}
	at := -1
	for i, vt := range types {
		if str(vt[0]) == "cpu" && str(vt[1]) == "nanoseconds" {
			at = i
		}
	}
	if at < 0 {
		return nil, errors.New("cpu profile: no cpu/nanoseconds sample type")
	}
	sums := map[string]int64{}
	for _, s := range samples {
		if at >= len(s.values) {
			continue
		}
		v := ""
		for _, l := range s.labels {
			if str(l.key) == key {
				v = str(l.str)
			}
		}
		sums[v] += s.values[at]
	}
	return sums, nil
}

// protoFields calls f for each field of a protobuf message: varint
// fields with v, length-delimited ones with b. Fixed-width fields are
// skipped; groups are refused.
func protoFields(m []byte, f func(num, wire int, v uint64, b []byte) error) error {
	for len(m) > 0 {
		tag, n := binary.Uvarint(m)
		if n <= 0 {
			return errors.New("bad field tag")
		}
		m = m[n:]
		num, wire := int(tag>>3), int(tag&7)
		var v uint64
		var b []byte
		switch wire {
		case 0:
			if v, n = binary.Uvarint(m); n <= 0 {
				return errors.New("bad varint")
			}
			m = m[n:]
		case 1:
			if len(m) < 8 {
				return errors.New("short fixed64")
			}
			m = m[8:]
			continue
		case 2:
			l, n := binary.Uvarint(m)
			if n <= 0 || l > uint64(len(m)-n) {
				return errors.New("bad length")
			}
			b, m = m[n:n+int(l)], m[n+int(l):]
		case 5:
			if len(m) < 4 {
				return errors.New("short fixed32")
			}
			m = m[4:]
			continue
		default:
			return fmt.Errorf("wire type %d", wire)
		}
		if err := f(num, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}

func packedVarints(b []byte) ([]int64, error) {
	var out []int64
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("bad packed varint")
		}
		out = append(out, int64(v))
		b = b[n:]
	}
	return out, nil
}
