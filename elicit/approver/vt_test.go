package approver_test

import (
	"strconv"
	"strings"
)

// vt is a small terminal emulator, enough to read what a person would see
// of the bytes the card writes: printable characters with auto-wrap at the
// width (xterm's: the cursor waits at the last column until the next
// character), CR, LF (no carriage return: the pty is raw while a card is
// answered, and the kernel adds the CR itself otherwise), backspace, and
// the CSI sequences the card and x/term's line editor use — cursor moves
// A B C D and erase in line K; colours and modes are ignored. Rows are
// kept as scrollback, never scrolled away.
type vt struct {
	cols    int
	rows    [][]rune
	x, y    int
	pending bool // the cursor waits at the last column
}

func newVT(cols int) *vt { return &vt{cols: cols, rows: [][]rune{nil}} }

func (v *vt) row() []rune {
	for len(v.rows) <= v.y {
		v.rows = append(v.rows, nil)
	}
	for len(v.rows[v.y]) < v.cols {
		v.rows[v.y] = append(v.rows[v.y], ' ')
	}
	return v.rows[v.y]
}

func (v *vt) feed(s string) {
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; {
		case r == '\r':
			v.x, v.pending = 0, false
		case r == '\n':
			v.y++
			v.pending = false
		case r == '\b':
			v.x, v.pending = max(v.x-1, 0), false
		case r == 0x1b && i+1 < len(rs) && rs[i+1] == '[':
			j := i + 2
			for j < len(rs) && (rs[j] < 0x40 || rs[j] > 0x7e) {
				j++
			}
			if j == len(rs) {
				return
			}
			n, err := strconv.Atoi(strings.TrimLeft(string(rs[i+2:j]), "?"))
			if err != nil || n == 0 {
				n = 1
			}
			v.pending = false
			switch rs[j] {
			case 'A':
				v.y = max(v.y-n, 0)
			case 'B':
				v.y += n
			case 'C':
				v.x = min(v.x+n, v.cols-1)
			case 'D':
				v.x = max(v.x-n, 0)
			case 'K':
				row := v.row()
				mode, _ := strconv.Atoi(string(rs[i+2 : j]))
				from, to := v.x, v.cols
				switch mode {
				case 1:
					from, to = 0, v.x+1
				case 2:
					from = 0
				}
				for k := from; k < to && k < len(row); k++ {
					row[k] = ' '
				}
			}
			i = j
		case r < ' ':
		default:
			if v.pending {
				v.x, v.pending = 0, false
				v.y++
			}
			v.row()[v.x] = r
			if v.x == v.cols-1 {
				v.pending = true
			} else {
				v.x++
			}
		}
	}
}

// lines is the screen, each row without its trailing blanks.
func (v *vt) lines() []string {
	out := make([]string, len(v.rows))
	for i, r := range v.rows {
		out[i] = strings.TrimRight(string(r), " ")
	}
	return out
}

// screenOf is what a terminal cols wide shows after out.
func screenOf(out string, cols int) []string {
	v := newVT(cols)
	v.feed(out)
	return v.lines()
}
