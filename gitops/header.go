package gitops

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// ErrHeader reports a WTXT or WSUM whose header values cannot be read.
var ErrHeader = errors.New("gitops: header")

// Header holds the WTXT header values gitops records in commits, tags and
// the summary file. It is read from the `meta` and `root` lines (or, for a
// streaming WTXT with `root_pending`, from the WSUM line).
type Header struct {
	Gen        uint64 // meta gen
	GenText    string // meta gen exactly as written, e.g. "000123"
	TS         string // meta ts
	Build      string // meta build
	SHA256All  string // root sha256_all (hex64)
	MerklePrev string // root merkle_prev (hex64)
	MerkleThis string // root merkle_this (hex64)
	Pending    bool   // the WTXT has root_pending; root values came from a WSUM
}

// maxHeaderLine bounds one header line while scanning for `meta`/`root`.
const maxHeaderLine = 64 << 10

// ParseHeader reads the header values from the start of a WTXT file. It
// reads at most the header lines (up to the first `arr` line) and checks
// only what it needs: the `WTXT 1` line, and the gen/ts/build and
// sha256_all/merkle_prev/merkle_this fields. It is not a verifier.
// For a streaming WTXT (root_pending) the root values are left empty and
// Pending is set; complete them with ParseWSUM.
func ParseHeader(r io.Reader) (*Header, error) {
	br := bufio.NewReaderSize(r, 4096)
	var h Header
	var sawMeta, sawRoot bool
	for n := 1; ; n++ {
		line, err := readLimitedLine(br, maxHeaderLine)
		if err != nil {
			return nil, fmt.Errorf("%w: WTXT line %d: %v", ErrHeader, n, err)
		}
		switch {
		case n == 1:
			if line != "WTXT 1" {
				return nil, fmt.Errorf("%w: WTXT line 1: want \"WTXT 1\", got %q", ErrHeader, truncate([]byte(line)))
			}
		case strings.HasPrefix(line, "meta "):
			f := fields(line)
			h.GenText, h.TS, h.Build = f["gen"], f["ts"], f["build"]
			g, err := strconv.ParseUint(h.GenText, 10, 64)
			if err != nil || len(h.GenText) < 6 || h.TS == "" || h.Build == "" {
				return nil, fmt.Errorf("%w: WTXT line %d: meta needs gen (>= 6 digits), ts and build", ErrHeader, n)
			}
			h.Gen, sawMeta = g, true
		case strings.HasPrefix(line, "root "):
			f := fields(line)
			h.SHA256All, h.MerklePrev, h.MerkleThis = f["sha256_all"], f["merkle_prev"], f["merkle_this"]
			if !wtxt.IsHex64(h.SHA256All) || !wtxt.IsHex64(h.MerklePrev) || !wtxt.IsHex64(h.MerkleThis) {
				return nil, fmt.Errorf("%w: WTXT line %d: root needs sha256_all, merkle_prev and merkle_this as 64 hex digits", ErrHeader, n)
			}
			sawRoot = true
		case strings.HasPrefix(line, "root_pending "):
			h.Pending, sawRoot = true, true
		case strings.HasPrefix(line, "arr ") || line == "endwtxt":
			return nil, fmt.Errorf("%w: WTXT line %d: header ends without meta and root lines", ErrHeader, n)
		}
		if sawMeta && sawRoot {
			return &h, nil
		}
	}
}

// ParseWSUM fills h's root values from a WSUM file (`WSUM 1 sha256_all=...
// merkle_prev=... merkle_this=... [sign=...]`).
func ParseWSUM(r io.Reader, h *Header) error {
	line, err := readLimitedLine(bufio.NewReader(r), maxHeaderLine)
	if err != nil {
		return fmt.Errorf("%w: WSUM: %v", ErrHeader, err)
	}
	if !strings.HasPrefix(line, "WSUM 1 ") {
		return fmt.Errorf("%w: WSUM: want \"WSUM 1\" line, got %q", ErrHeader, truncate([]byte(line)))
	}
	f := fields(line)
	if !wtxt.IsHex64(f["sha256_all"]) || !wtxt.IsHex64(f["merkle_prev"]) || !wtxt.IsHex64(f["merkle_this"]) {
		return fmt.Errorf("%w: WSUM: needs sha256_all, merkle_prev and merkle_this as 64 hex digits", ErrHeader)
	}
	h.SHA256All, h.MerklePrev, h.MerkleThis = f["sha256_all"], f["merkle_prev"], f["merkle_this"]
	return nil
}

func readLimitedLine(br *bufio.Reader, limit int) (string, error) {
	var b strings.Builder
	for {
		frag, err := br.ReadSlice('\n')
		if b.Len()+len(frag) > limit {
			return "", fmt.Errorf("line longer than %d bytes", limit)
		}
		b.Write(frag)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			return "", errors.New("unexpected end of file")
		case err != nil:
			return "", err
		}
		return strings.TrimSuffix(b.String(), "\n"), nil
	}
}

// fields splits `key=value` fields of a line (the first word is skipped);
// quoted values are not needed for the fields gitops reads.
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line)[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return m
}
