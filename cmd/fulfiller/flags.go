package main

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// sizeValue is a byte count flag that takes plain bytes or a binary unit:
// 1048576, 512KiB, 1MiB (KB/MB are read as KiB/MiB; nobody means 1000 here).
type sizeValue int64

func (s *sizeValue) String() string { return formatSize(int64(*s)) }
func (s *sizeValue) Type() string   { return "size" }

func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB/MiB/GiB)", v)
	}
	return n * mult, nil
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// durationsAsText makes the JSON handler write a time.Duration as the
// text handler and every flag do ("1.5s", "10m0s"), not as a count of
// nanoseconds that reads as a timestamp or a size.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// newLogger builds the process logger from --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(translateNATS(slog.NewTextHandler(w, opts))), nil
	case "json":
		opts.ReplaceAttr = durationsAsText
		return slog.New(translateNATS(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", format)
}
