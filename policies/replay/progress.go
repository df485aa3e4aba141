package replay

import (
	"fmt"
	"io"
	"strings"
)

// ProgressBar returns an Options.OnProgress that draws a one-line bar on
// w (a terminal: it redraws with a carriage return), with the share of
// total bytes read when total is known (> 0) and the lines so far. Call
// the returned done once the replay ends to finish the line.
func ProgressBar(w io.Writer, total int64) (update func(lines, bytes int64), done func()) {
	const width = 30
	drawn := false
	update = func(lines, n int64) {
		drawn = true
		if total <= 0 {
			fmt.Fprintf(w, "\rreplay: %d lines", lines)
			return
		}
		frac := float64(n) / float64(total)
		frac = min(max(frac, 0), 1)
		full := int(frac * width)
		fmt.Fprintf(w, "\rreplay: [%s%s] %3.0f%% %d lines", strings.Repeat("#", full), strings.Repeat(" ", width-full), frac*100, lines)
	}
	done = func() {
		if drawn {
			fmt.Fprintln(w)
		}
	}
	return update, done
}
