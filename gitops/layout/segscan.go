package layout

import (
	"bytes"
	"encoding/hex"
	"path"
)

// segScan finds the seg lines of skeleton text fed to it in pieces of
// any size (a line may span pieces) and names their segment blobs, for
// read-ahead only: it validates nothing beyond what it needs to build a
// name (a seg line's last field sha256=<64 hex digits>), and the
// assembler checks every line anyway. Memory is bounded: only the start
// of the current line is kept, up to maxSegScanLine bytes; a longer line
// is no seg line.
type segScan struct {
	line []byte
	long bool // the current line is longer than maxSegScanLine
}

// maxSegScanLine bounds a seg line as segScan looks for it: "seg
// chunks=<n> len=<n> sha256=<hex64>" with decimals of at most 19 digits.
const maxSegScanLine = 160

// feed scans b, the next bytes of the text, and appends to names the
// path (seg/<hh>/<hex64>.seg) of every seg line it completes.
func (s *segScan) feed(b []byte, names []string) []string {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if !s.long {
			if len(s.line)+len(part) > maxSegScanLine {
				s.long = true
			} else {
				s.line = append(s.line, part...)
			}
		}
		if i < 0 {
			break
		}
		if !s.long {
			if name, ok := segLineName(s.line); ok {
				names = append(names, name)
			}
		}
		s.line, s.long = s.line[:0], false
		b = b[i+1:]
	}
	return names
}

// segLineName returns the segment path a seg line names.
func segLineName(line []byte) (string, bool) {
	const key = " sha256="
	if !bytes.HasPrefix(line, []byte("seg ")) {
		return "", false
	}
	i := bytes.LastIndex(line, []byte(key))
	if i < 0 || len(line)-i-len(key) != 64 {
		return "", false
	}
	var d [32]byte
	if _, err := hex.Decode(d[:], line[i+len(key):]); err != nil {
		return "", false
	}
	dir, name := SegName(d)
	return path.Join(dir, name), true
}
