package review

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Patch is the parsed unified diff of one file as GitHub shows it: the
// `patch` field of a pull request file (hunks only), or the output of
// `git diff` for one file (its diff/index/---/+++ header lines are
// skipped). It answers where a line of the new (RIGHT) file sits in the
// diff.
type Patch struct {
	// runs are maximal stretches of consecutive new-file lines at
	// consecutive positions, in increasing order (memory is per run, not
	// per line, so a whole-file rewrite stays small).
	runs []run
	// Hunks is the number of @@ headers.
	Hunks int
}

// run: new-file lines [line, line+n) sit at positions [pos, pos+n).
type run struct{ line, pos, n int }

func (p *Patch) add(line, pos int) {
	if k := len(p.runs); k > 0 {
		r := &p.runs[k-1]
		if r.line+r.n == line && r.pos+r.n == pos {
			r.n++
			return
		}
	}
	p.runs = append(p.runs, run{line, pos, 1})
}

// ParsePatch parses a unified diff of a single file. Lines before the first
// "@@" header are ignored; after it, every line counts as one position: the
// line just below the first header is position 1 and the count runs on
// through later hunk headers, as GitHub's legacy `position` does. Added
// ('+') and context (' ') lines advance the new-file line counter and are
// commentable on the RIGHT side; removed ('-') lines and "\ No newline at
// end of file" markers take a position but no new-file line. A malformed
// hunk header or a hunk whose line counts disagree with its header is an
// error.
func ParsePatch(patch string) (*Patch, error) { return ReadPatch(strings.NewReader(patch)) }

// ReadPatch is ParsePatch reading from r, streaming.
func ReadPatch(r io.Reader) (*Patch, error) {
	p := &Patch{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	pos := -1 // -1: before the first hunk header
	var newLine, oldLeft, newLeft int
	lineNo := 0
	for sc.Scan() {
		lineNo++
		l := sc.Text()
		if strings.HasPrefix(l, "@@") {
			if pos >= 0 && (oldLeft != 0 || newLeft != 0) {
				return nil, fmt.Errorf("patch line %d: hunk ends early (%d old and %d new lines missing)", lineNo, oldLeft, newLeft)
			}
			o, n, start, err := parseHunkHeader(l)
			if err != nil {
				return nil, fmt.Errorf("patch line %d: %w", lineNo, err)
			}
			oldLeft, newLeft, newLine = o, n, start
			p.Hunks++
			pos++ // the first header is position 0; later ones take a position
			continue
		}
		if pos < 0 {
			continue // diff --git / index / --- / +++ headers
		}
		if l == "" {
			// Some producers strip the single space of an empty context line.
			l = " "
		}
		switch l[0] {
		case '+':
			if newLeft == 0 {
				return nil, fmt.Errorf("patch line %d: more added lines than the hunk header says", lineNo)
			}
			pos++
			p.add(newLine, pos)
			newLine++
			newLeft--
		case ' ':
			if newLeft == 0 || oldLeft == 0 {
				return nil, fmt.Errorf("patch line %d: more context lines than the hunk header says", lineNo)
			}
			pos++
			p.add(newLine, pos)
			newLine++
			newLeft--
			oldLeft--
		case '-':
			if oldLeft == 0 {
				return nil, fmt.Errorf("patch line %d: more removed lines than the hunk header says", lineNo)
			}
			pos++
			oldLeft--
		case '\\':
			pos++
		default:
			if oldLeft == 0 && newLeft == 0 {
				// Trailing text after the last hunk (e.g. the next file
				// of a multi-file diff): stop.
				return p, nil
			}
			return nil, fmt.Errorf("patch line %d: unexpected line inside a hunk (%d bytes; want a line starting with space, +, - or \\)", lineNo, len(l))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	if oldLeft != 0 || newLeft != 0 {
		return nil, fmt.Errorf("patch: last hunk is truncated (%d old and %d new lines missing)", oldLeft, newLeft)
	}
	return p, nil
}

// Position returns the legacy diff position of new-file line n (1-based)
// and whether the line appears in the diff at all. Only lines present in
// some hunk can carry a review comment.
func (p *Patch) Position(n int) (int, bool) {
	if p == nil {
		return 0, false
	}
	i := sort.Search(len(p.runs), func(i int) bool { return p.runs[i].line+p.runs[i].n > n })
	if i == len(p.runs) || p.runs[i].line > n {
		return 0, false
	}
	return p.runs[i].pos + n - p.runs[i].line, true
}

// parseHunkHeader reads "@@ -a[,b] +c[,d] @@ ..." and returns the old and
// new line counts and the first new line.
func parseHunkHeader(l string) (oldCount, newCount, newStart int, err error) {
	f := strings.Fields(l)
	if len(f) < 4 || f[0] != "@@" || f[3] != "@@" || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return 0, 0, 0, fmt.Errorf("malformed hunk header (%d bytes): want @@ -a[,b] +c[,d] @@", len(l))
	}
	_, oc, err1 := parseRange(f[1][1:])
	ns, nc, err2 := parseRange(f[2][1:])
	if err1 != nil || err2 != nil {
		return 0, 0, 0, fmt.Errorf("malformed hunk header (%d bytes): want @@ -a[,b] +c[,d] @@", len(l))
	}
	if nc == 0 {
		// "+c,0": no new lines; c is the line before the hunk.
		ns++
	}
	return oc, nc, ns, nil
}

func parseRange(s string) (start, count int, err error) {
	a, b, ok := strings.Cut(s, ",")
	start, err = strconv.Atoi(a)
	if err != nil || start < 0 {
		return 0, 0, fmt.Errorf("bad range (%d bytes): want a[,b] decimals", len(s))
	}
	count = 1
	if ok {
		if count, err = strconv.Atoi(b); err != nil || count < 0 {
			return 0, 0, fmt.Errorf("bad range (%d bytes): want a[,b] decimals", len(s))
		}
	}
	return start, count, nil
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
