package numpy

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// zip record signatures and sizes.
const (
	sigLocal     = 0x04034b50
	sigCentral   = 0x02014b50
	sigEOCD      = 0x06054b50
	sigEOCD64    = 0x06064b50
	sigLocator64 = 0x07064b50
	localLen     = 30
	centralLen   = 46
	eocdLen      = 22
	eocd64Len    = 56
	locator64Len = 20
	maxComment   = 0xffff

	methodStore   = 0
	methodDeflate = 8

	// zip64Limit is Python zipfile's ZIP64_LIMIT: sizes and offsets above
	// it are written to zip64 fields and records.
	zip64Limit = 1<<31 - 1

	// defaultDOSDate is 1980-01-01, the earliest MS-DOS date.
	defaultDOSDate = 0x21
)

// member is one central directory entry, checked against its local header.
type member struct {
	name         string
	flags        uint16
	method       uint16
	time, date   uint16
	crc          uint32
	csize, usize uint64
	headerOff    uint64
	dataOff      int64
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// readAt reads n bytes at off (n is small: a record).
func readAt(r io.ReaderAt, off, n int64) ([]byte, error) {
	if b, ok := snapshot.BytesOf(r); ok && off >= 0 && off+n <= int64(len(b)) {
		return b[off : off+n], nil
	}
	p := make([]byte, n)
	if err := snapshot.ReadFullAt(r, p, off); err != nil {
		return nil, err
	}
	return p, nil
}

// zip64Extra returns the values of the zip64 extra field (id 1) of extra.
func zip64Extra(extra []byte) (vals []uint64, found bool, ok bool) {
	for len(extra) >= 4 {
		id, n := le16(extra), int(le16(extra[2:]))
		if 4+n > len(extra) {
			return nil, false, false
		}
		if id == 1 {
			if n%8 != 0 {
				return nil, true, false
			}
			for i := 0; i < n; i += 8 {
				vals = append(vals, le64(extra[4+i:]))
			}
			return vals, true, true
		}
		extra = extra[4+n:]
	}
	return nil, false, len(extra) == 0
}

// readDirectory parses the end records and central directory of a zip of
// size bytes and checks every member's local header against it.
func readDirectory(r io.ReaderAt, size int64, file string) ([]*member, error) {
	fail := func(m string, off int64, sentinel error, format string, a ...any) error {
		return &Error{Format: "numpy", File: file, Part: memberWhere(m), Offset: off, Check: fmt.Sprintf(format, a...), Err: sentinel}
	}
	if size < eocdLen {
		return nil, fail("", 0, ErrCorrupt, "%d bytes, too short for a zip end of central directory record", size)
	}
	tail := min(size, eocdLen+maxComment)
	buf, err := readAt(r, size-tail, tail)
	if err != nil {
		return nil, fail("", size-tail, ErrCorrupt, "read zip end records: %v", err)
	}
	eocd := int64(-1)
	for i := len(buf) - eocdLen; i >= 0; i-- {
		if le32(buf[i:]) == sigEOCD && int64(i)+eocdLen+int64(le16(buf[i+20:])) == int64(len(buf)) {
			eocd = size - tail + int64(i)
			buf = buf[i:]
			break
		}
	}
	if eocd < 0 {
		return nil, fail("", size-tail, ErrCorrupt, "zip end of central directory record not found (or bytes follow it)")
	}
	if le16(buf[4:]) != 0 || le16(buf[6:]) != 0 || le16(buf[8:]) != le16(buf[10:]) {
		return nil, fail("", eocd, ErrUnsupported, "multi-disk zip archive")
	}
	count, cdSize, cdOff := uint64(le16(buf[10:])), uint64(le32(buf[12:])), uint64(le32(buf[16:]))
	cdEnd := eocd // central directory must end where the end records start
	if eocd >= locator64Len {
		loc, err := readAt(r, eocd-locator64Len, locator64Len)
		if err != nil {
			return nil, fail("", eocd-locator64Len, ErrCorrupt, "read zip64 locator: %v", err)
		}
		if le32(loc) == sigLocator64 {
			off := le64(loc[8:])
			if le32(loc[4:]) != 0 || le32(loc[16:]) != 1 {
				return nil, fail("", eocd-locator64Len, ErrUnsupported, "multi-disk zip64 archive")
			}
			if off > uint64(eocd-locator64Len) || uint64(eocd-locator64Len)-off < eocd64Len {
				return nil, fail("", eocd-locator64Len, ErrCorrupt, "zip64 end record offset %d out of range", off)
			}
			rec, err := readAt(r, int64(off), eocd64Len)
			if err != nil {
				return nil, fail("", int64(off), ErrCorrupt, "read zip64 end record: %v", err)
			}
			if le32(rec) != sigEOCD64 {
				return nil, fail("", int64(off), ErrCorrupt, "zip64 end record signature missing")
			}
			if le32(rec[16:]) != 0 || le32(rec[20:]) != 0 || le64(rec[24:]) != le64(rec[32:]) {
				return nil, fail("", int64(off), ErrUnsupported, "multi-disk zip64 archive")
			}
			count, cdSize, cdOff = le64(rec[32:]), le64(rec[40:]), le64(rec[48:])
			cdEnd = int64(off)
		}
	}
	if cdOff > uint64(cdEnd) || cdSize != uint64(cdEnd)-cdOff {
		return nil, fail("", eocd, ErrCorrupt, "central directory at %d of %d bytes does not end where the end records start (%d)", cdOff, cdSize, cdEnd)
	}
	if cdSize > MaxDirectorySize {
		return nil, fail("", eocd, ErrLimit, "central directory of %d bytes exceeds the limit of %d", cdSize, MaxDirectorySize)
	}
	if count > MaxMembers {
		return nil, fail("", eocd, ErrLimit, "%d members exceed the limit of %d", count, MaxMembers)
	}
	if count > cdSize/centralLen {
		return nil, fail("", eocd, ErrCorrupt, "%d members cannot fit a central directory of %d bytes", count, cdSize)
	}
	cd, err := readAt(r, int64(cdOff), int64(cdSize))
	if err != nil {
		return nil, fail("", int64(cdOff), ErrCorrupt, "read central directory: %v", err)
	}
	members := make([]*member, 0, count)
	pos := 0
	for i := uint64(0); i < count; i++ {
		at := int64(cdOff) + int64(pos)
		if len(cd)-pos < centralLen || le32(cd[pos:]) != sigCentral {
			return nil, fail("", at, ErrCorrupt, "central directory entry %d: signature missing", i)
		}
		e := cd[pos:]
		nlen, xlen, clen := int(le16(e[28:])), int(le16(e[30:])), int(le16(e[32:]))
		if centralLen+nlen+xlen+clen > len(e) {
			return nil, fail("", at, ErrCorrupt, "central directory entry %d runs past the directory", i)
		}
		m := &member{
			name:  string(e[centralLen : centralLen+nlen]),
			flags: le16(e[8:]), method: le16(e[10:]), time: le16(e[12:]), date: le16(e[14:]),
			crc: le32(e[16:]), csize: uint64(le32(e[20:])), usize: uint64(le32(e[24:])),
			headerOff: uint64(le32(e[42:])),
		}
		if le16(e[34:]) != 0 {
			return nil, fail(m.name, at, ErrUnsupported, "member on another disk")
		}
		vals, found, ok := zip64Extra(e[centralLen+nlen : centralLen+nlen+xlen])
		if !ok {
			return nil, fail(m.name, at, ErrCorrupt, "central directory extra fields are malformed")
		}
		if found {
			for _, f := range []*uint64{&m.usize, &m.csize, &m.headerOff} {
				if *f == 0xffffffff {
					if len(vals) == 0 {
						return nil, fail(m.name, at, ErrCorrupt, "zip64 extra field lacks a value the entry defers to it")
					}
					*f, vals = vals[0], vals[1:]
				}
			}
		}
		pos += centralLen + nlen + xlen + clen
		members = append(members, m)
	}
	if pos != len(cd) {
		return nil, fail("", int64(cdOff)+int64(pos), ErrCorrupt, "%d bytes of the central directory follow its last entry", len(cd)-pos)
	}
	// local headers
	for _, m := range members {
		if m.flags&1 != 0 {
			return nil, fail(m.name, -1, ErrUnsupported, "encrypted member")
		}
		if m.method != methodStore && m.method != methodDeflate {
			return nil, fail(m.name, -1, ErrUnsupported, "compression method %d (only stored and deflated)", m.method)
		}
		if m.method == methodStore && m.csize != m.usize {
			return nil, fail(m.name, -1, ErrCorrupt, "stored member: compressed size %d != size %d in the central directory", m.csize, m.usize)
		}
		if m.headerOff > cdOff || cdOff-m.headerOff < localLen {
			return nil, fail(m.name, -1, ErrCorrupt, "local header offset %d is not before the central directory at %d", m.headerOff, cdOff)
		}
		at := int64(m.headerOff)
		lh, err := readAt(r, at, localLen)
		if err != nil {
			return nil, fail(m.name, at, ErrCorrupt, "read local header: %v", err)
		}
		if le32(lh) != sigLocal {
			return nil, fail(m.name, at, ErrCorrupt, "local header signature missing")
		}
		nlen, xlen := int64(le16(lh[26:])), int64(le16(lh[28:]))
		if uint64(localLen+nlen+xlen) > cdOff-m.headerOff {
			return nil, fail(m.name, at, ErrCorrupt, "local header runs into the central directory")
		}
		rest, err := readAt(r, at+localLen, nlen+xlen)
		if err != nil {
			return nil, fail(m.name, at, ErrCorrupt, "read local header: %v", err)
		}
		if string(rest[:nlen]) != m.name {
			return nil, fail(m.name, at+localLen, ErrCorrupt, "local header names another file than the central directory")
		}
		if le16(lh[8:]) != m.method || le16(lh[6:])&1 != 0 {
			return nil, fail(m.name, at+8, ErrCorrupt, "local header method or encryption flag differs from the central directory")
		}
		if le16(lh[6:])&8 == 0 { // no data descriptor: the local header has the sizes
			lcrc, lcs, lus := le32(lh[14:]), uint64(le32(lh[18:])), uint64(le32(lh[22:]))
			vals, found, ok := zip64Extra(rest[nlen:])
			if !ok {
				return nil, fail(m.name, at+localLen+nlen, ErrCorrupt, "local extra fields are malformed")
			}
			if found {
				// zip64: the extra holds size then compressed size (NumPy
				// always writes both, with the real values in the header too)
				if len(vals) >= 1 && (lus == 0xffffffff || len(vals) >= 2) {
					if lus == 0xffffffff {
						lus = vals[0]
					} else if vals[0] != lus {
						return nil, fail(m.name, at+localLen+nlen, ErrCorrupt, "zip64 extra size %d differs from the local header's %d", vals[0], lus)
					}
				}
				if len(vals) >= 2 {
					if lcs == 0xffffffff {
						lcs = vals[1]
					} else if vals[1] != lcs {
						return nil, fail(m.name, at+localLen+nlen, ErrCorrupt, "zip64 extra compressed size %d differs from the local header's %d", vals[1], lcs)
					}
				}
			}
			if lcrc != m.crc || lcs != m.csize || lus != m.usize {
				return nil, fail(m.name, at+14, ErrCorrupt, "local header crc/compressed size/size (%08x/%d/%d) differ from the central directory (%08x/%d/%d)", lcrc, lcs, lus, m.crc, m.csize, m.usize)
			}
		}
		m.dataOff = at + localLen + nlen + xlen
		if m.csize > cdOff-uint64(m.dataOff) {
			return nil, fail(m.name, m.dataOff, ErrCorrupt, "%d bytes of member data run into the central directory at %d", m.csize, cdOff)
		}
	}
	// no two members may share bytes (overlapping members are a zip bomb
	// technique)
	byOff := append([]*member(nil), members...)
	sort.Slice(byOff, func(i, j int) bool { return byOff[i].headerOff < byOff[j].headerOff })
	for i := 1; i < len(byOff); i++ {
		prev := byOff[i-1]
		if uint64(prev.dataOff)+prev.csize > byOff[i].headerOff {
			return nil, fail(byOff[i].name, int64(byOff[i].headerOff), ErrCorrupt, "member overlaps the previous member's data")
		}
	}
	return members, nil
}

func decodeNPZ(ctx context.Context, r io.ReaderAt, size int64, file string, bud *budget) (*snapshot.Snapshot, error) {
	members, err := readDirectory(r, size, file)
	if err != nil {
		return nil, err
	}
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
	seen := map[string]bool{}
	var order []string
	for _, m := range members {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fail := func(off int64, sentinel error, format string, a ...any) error {
			return &Error{Format: "numpy", File: file, Part: memberWhere(m.name), Offset: off, Check: fmt.Sprintf(format, a...), Err: sentinel}
		}
		key, ok := strings.CutSuffix(m.name, ".npy")
		if !ok || key == "" {
			return nil, fail(int64(m.headerOff), ErrUnsupported, "member is not a .npy file (name does not end in .npy)")
		}
		var a *snapshot.Array
		switch m.method {
		case methodStore:
			if err := checkCRC(r, m); err != nil {
				return nil, fail(m.dataOff, ErrCorrupt, "%v", err)
			}
			a, err = decodeNPY(r, m.dataOff, int64(m.usize), loc{file: file, member: m.name, base: m.dataOff}, bud)
		case methodDeflate:
			if m.usize > m.csize*maxDeflateRatio+1024 {
				return nil, fail(m.dataOff, ErrCorrupt, "declared size %d is impossible for %d deflated bytes", m.usize, m.csize)
			}
			// Charged before anything is inflated: the member is inflated
			// once here to verify it and again whenever it is read.
			if rem := bud.file.Remaining(); m.usize > uint64(rem) || bud.file.Take(int64(m.usize), "") != nil {
				return nil, fail(m.dataOff, ErrLimit, "declared inflated size %d exceeds the remaining decode budget of %d bytes (%d for this file; DecodeOptions.MaxDecoded)", m.usize, rem, bud.file.Limit())
			}
			if err := verifyInflate(r, m, fail); err != nil {
				return nil, err
			}
			src := &inflateSource{r: r, off: m.dataOff, csize: int64(m.csize), size: int64(m.usize)}
			a, err = decodeNPY(src, 0, src.size, loc{file: file, member: m.name, base: -1}, bud)
		}
		if err != nil {
			return nil, err
		}
		if a.Attrs == nil {
			a.Attrs = map[string]string{}
		}
		a.Name = key
		if !snapshot.PortableName(key) {
			a.Name = sanitizedName(key)
			a.Attrs[AttrName] = key
		}
		if seen[a.Name] {
			return nil, fail(int64(m.headerOff), ErrCorrupt, "duplicate array name")
		}
		seen[a.Name] = true
		if m.method == methodDeflate {
			a.Attrs[AttrZipMethod] = "deflate"
		}
		if m.date != defaultDOSDate || m.time != 0 {
			a.Attrs[AttrZipMTime] = formatDOSTime(m.date, m.time)
		}
		if len(a.Attrs) == 0 {
			a.Attrs = nil
		}
		s.Arrays = append(s.Arrays, a)
		order = append(order, a.Name)
	}
	if !sort.StringsAreSorted(order) {
		b, _ := json.Marshal(order)
		s.Attrs = map[string]string{AttrOrder: string(b)}
	}
	return s, nil
}

// checkCRC checks a stored member's CRC-32, releasing mapped pages as it
// goes.
func checkCRC(r io.ReaderAt, m *member) error {
	var crc uint32
	const piece = 4 << 20
	var buf []byte
	for off := int64(0); off < int64(m.csize); off += piece {
		n := min(piece, int64(m.csize)-off)
		if b, ok := snapshot.BytesOf(r); ok && m.dataOff+off+n <= int64(len(b)) {
			crc = crc32.Update(crc, crc32.IEEETable, b[m.dataOff+off:m.dataOff+off+n])
			snapshot.ReleaseAt(r, m.dataOff+off, n)
			continue
		}
		if buf == nil {
			buf = make([]byte, min(piece, int64(m.csize)))
		}
		if err := snapshot.ReadFullAt(r, buf[:n], m.dataOff+off); err != nil {
			return fmt.Errorf("read member data: %w", err)
		}
		crc = crc32.Update(crc, crc32.IEEETable, buf[:n])
	}
	if crc != m.crc {
		return fmt.Errorf("crc32 of the member data is %08x, the zip says %08x", crc, m.crc)
	}
	return nil
}

// maxDeflateRatio bounds how much deflate can expand: 258 bytes from one
// 2-bit code, i.e. about 1032:1.
const maxDeflateRatio = 1032

// sanitizedName returns a portable name for an .npz key: illegal bytes
// replaced by '_', then '-' and 16 hex digits of SHA-256(key).
func sanitizedName(key string) string {
	const maxBase = snapshot.MaxNameLen - 17
	b := []byte(key)
	if len(b) > maxBase {
		b = b[:maxBase]
	}
	for i, c := range b {
		if !snapshot.NameByte(c) {
			b[i] = '_'
		}
	}
	sum := sha256.Sum256([]byte(key))
	return string(b) + "-" + hex.EncodeToString(sum[:8])
}

// formatDOSTime renders MS-DOS date and time fields as stored (no range
// checks, so every value round-trips).
func formatDOSTime(date, tm uint16) string {
	return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d",
		1980+int(date>>9), int(date>>5&0xf), int(date&0x1f),
		int(tm>>11), int(tm>>5&0x3f), int(tm&0x1f)*2)
}

// parseDOSTime inverts formatDOSTime.
func parseDOSTime(s string) (date, tm uint16, err error) {
	var y, mo, d, h, mi, sec int
	if len(s) != 19 {
		return 0, 0, errors.New("not YYYY-MM-DD hh:mm:ss")
	}
	if _, err := fmt.Sscanf(s, "%04d-%02d-%02d %02d:%02d:%02d", &y, &mo, &d, &h, &mi, &sec); err != nil {
		return 0, 0, errors.New("not YYYY-MM-DD hh:mm:ss")
	}
	if y < 1980 || y > 1980+127 || mo > 15 || d > 31 || h > 31 || mi > 63 || sec > 62 || sec%2 != 0 || formatDOSTime(uint16((y-1980)<<9|mo<<5|d), uint16(h<<11|mi<<5|sec/2)) != s {
		return 0, 0, errors.New("field out of the MS-DOS range")
	}
	return uint16((y-1980)<<9 | mo<<5 | d), uint16(h<<11 | mi<<5 | sec/2), nil
}

// countWriter counts what passes through to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// npzEntry is one member being written.
type npzEntry struct {
	plan       *npyPlan
	name       string
	deflate    bool
	date, time uint16
	crc        uint32
	csize      int64
	offset     int64
	version    uint16 // version needed to extract: 20, or 45 with zip64 sizes
}

// encodeNPZ writes an .npz archive the way np.savez (Python's zipfile with
// force_zip64) lays it out; see the package documentation.
func encodeNPZ(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions, bud *budget, lim int64) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("numpy: npz: %s: %w", fmt.Sprintf(format, a...), ErrInvalidSnapshot)
	}
	for k := range s.Attrs {
		if strings.HasPrefix(k, attrPrefix) && k != AttrOrder {
			return bad("unknown snapshot attribute %s", k)
		}
	}
	arrays := s.Sorted()
	if v, ok := s.Attrs[AttrOrder]; ok {
		var names []string
		if err := json.Unmarshal([]byte(v), &names); err != nil {
			return bad("%s is not a JSON array of names", AttrOrder)
		}
		byName := map[string]*snapshot.Array{}
		for _, a := range s.Arrays {
			byName[a.Name] = a
		}
		if len(names) != len(byName) {
			return bad("%s names %d arrays, the snapshot has %d", AttrOrder, len(names), len(byName))
		}
		arrays = arrays[:0]
		for _, n := range names {
			a := byName[n]
			if a == nil {
				return bad("%s names an array the snapshot lacks (or twice)", AttrOrder)
			}
			arrays = append(arrays, a)
			delete(byName, n)
		}
	}
	var entries []*npzEntry
	names := map[string]bool{}
	for _, a := range arrays {
		p, err := planNPY(a)
		if err != nil {
			if opts.Lossy && errors.Is(err, formats.ErrLossy) {
				opts.Drop(formats.DroppedDType("npz", a.Name, a.DType, "NumPy has no bf16 or fp8 dtype"))
				continue
			}
			return err
		}
		e := &npzEntry{plan: p, name: a.Name + ".npy", date: defaultDOSDate}
		if v, ok := a.Attrs[AttrName]; ok {
			if v == "" || len(v) > 0xffff-4 {
				return bad("array %q: %s is empty or too long", a.Name, AttrName)
			}
			e.name = v + ".npy"
		}
		if names[e.name] {
			return bad("array %q: member name used twice", a.Name)
		}
		names[e.name] = true
		switch v, ok := a.Attrs[AttrZipMethod]; {
		case !ok:
		case v == "deflate":
			e.deflate = true
		default:
			return bad("array %q: %s must be deflate", a.Name, AttrZipMethod)
		}
		if v, ok := a.Attrs[AttrZipMTime]; ok {
			if e.date, e.time, err = parseDOSTime(v); err != nil {
				return bad("array %q: %s: %v", a.Name, AttrZipMTime, err)
			}
		}
		entries = append(entries, e)
	}
	cw := &countWriter{w: w}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		// first pass: CRC and compressed size
		crc := crc32.NewIEEE()
		cnt := &countWriter{w: crc}
		if err := writeMember(ctx, cnt, e, bud, true); err != nil {
			return err
		}
		usize := e.plan.size()
		e.crc = crc.Sum32()
		e.csize = usize
		if e.deflate {
			dc := &countWriter{w: io.Discard}
			if err := writeMember(ctx, dc, e, bud, false); err != nil {
				return err
			}
			e.csize = dc.n
		}
		e.offset = cw.n
		// Python's zipfile: sizes over the limit go to the zip64 extra
		// (always present, NumPy forces zip64) and need version 4.5
		e.version = 20
		lcs, lus := uint32(e.csize), uint32(usize)
		if usize > lim || e.csize > lim {
			e.version = 45
			lcs, lus = 0xffffffff, 0xffffffff
		}
		lh := make([]byte, 0, localLen+len(e.name)+20)
		lh = binary.LittleEndian.AppendUint32(lh, sigLocal)
		lh = binary.LittleEndian.AppendUint16(lh, e.version)
		lh = binary.LittleEndian.AppendUint16(lh, nameFlags(e.name))
		lh = binary.LittleEndian.AppendUint16(lh, e.method())
		lh = binary.LittleEndian.AppendUint16(lh, e.time)
		lh = binary.LittleEndian.AppendUint16(lh, e.date)
		lh = binary.LittleEndian.AppendUint32(lh, e.crc)
		lh = binary.LittleEndian.AppendUint32(lh, lcs)
		lh = binary.LittleEndian.AppendUint32(lh, lus)
		lh = binary.LittleEndian.AppendUint16(lh, uint16(len(e.name)))
		lh = binary.LittleEndian.AppendUint16(lh, 20)
		lh = append(lh, e.name...)
		lh = binary.LittleEndian.AppendUint16(lh, 1)
		lh = binary.LittleEndian.AppendUint16(lh, 16)
		lh = binary.LittleEndian.AppendUint64(lh, uint64(usize))
		lh = binary.LittleEndian.AppendUint64(lh, uint64(e.csize))
		if _, err := cw.Write(lh); err != nil {
			return err
		}
		before := cw.n
		if err := writeMember(ctx, cw, e, bud, false); err != nil {
			return err
		}
		if cw.n-before != e.csize {
			return fmt.Errorf("numpy: npz: array %q: data changed while it was written (%d bytes, then %d)", e.plan.a.Name, e.csize, cw.n-before)
		}
	}
	cdOff := cw.n
	var cd bytes.Buffer
	le := binary.LittleEndian
	for _, e := range entries {
		usize := e.plan.size()
		cs, us, off := uint32(e.csize), uint32(usize), uint32(e.offset)
		var ex []uint64
		if usize > lim || e.csize > lim {
			ex = append(ex, uint64(usize), uint64(e.csize))
			cs, us = 0xffffffff, 0xffffffff
		}
		if e.offset > lim {
			ex = append(ex, uint64(e.offset))
			off = 0xffffffff
		}
		ver := e.version
		if len(ex) > 0 {
			ver = 45
		}
		c := make([]byte, 0, centralLen+len(e.name)+4+8*len(ex))
		c = le.AppendUint32(c, sigCentral)
		c = le.AppendUint16(c, 3<<8|ver) // made by: Unix
		c = le.AppendUint16(c, ver)
		c = le.AppendUint16(c, nameFlags(e.name))
		c = le.AppendUint16(c, e.method())
		c = le.AppendUint16(c, e.time)
		c = le.AppendUint16(c, e.date)
		c = le.AppendUint32(c, e.crc)
		c = le.AppendUint32(c, cs)
		c = le.AppendUint32(c, us)
		c = le.AppendUint16(c, uint16(len(e.name)))
		xlen := 0
		if len(ex) > 0 {
			xlen = 4 + 8*len(ex)
		}
		c = le.AppendUint16(c, uint16(xlen))
		c = le.AppendUint16(c, 0) // comment
		c = le.AppendUint16(c, 0) // disk
		c = le.AppendUint16(c, 0) // internal attributes
		c = le.AppendUint32(c, 0o600<<16)
		c = le.AppendUint32(c, off)
		c = append(c, e.name...)
		if len(ex) > 0 {
			c = le.AppendUint16(c, 1)
			c = le.AppendUint16(c, uint16(8*len(ex)))
			for _, v := range ex {
				c = le.AppendUint64(c, v)
			}
		}
		cd.Write(c)
	}
	count, cdSize := int64(len(entries)), int64(cd.Len())
	if count > 0xffff || cdOff > lim || cdSize > lim {
		// zip64 end record and locator, as Python's zipfile writes them
		z := le.AppendUint32(nil, sigEOCD64)
		z = le.AppendUint64(z, eocd64Len-12)
		z = le.AppendUint16(z, 45)
		z = le.AppendUint16(z, 45)
		z = le.AppendUint32(z, 0)
		z = le.AppendUint32(z, 0)
		z = le.AppendUint64(z, uint64(count))
		z = le.AppendUint64(z, uint64(count))
		z = le.AppendUint64(z, uint64(cdSize))
		z = le.AppendUint64(z, uint64(cdOff))
		z = le.AppendUint32(z, sigLocator64)
		z = le.AppendUint32(z, 0)
		z = le.AppendUint64(z, uint64(cdOff+cdSize))
		z = le.AppendUint32(z, 1)
		cd.Write(z)
		count, cdSize, cdOff = min(count, 0xffff), min(cdSize, 0xffffffff), min(cdOff, 0xffffffff)
	}
	end := make([]byte, 0, eocdLen)
	end = le.AppendUint32(end, sigEOCD)
	end = le.AppendUint16(end, 0)
	end = le.AppendUint16(end, 0)
	end = le.AppendUint16(end, uint16(count))
	end = le.AppendUint16(end, uint16(count))
	end = le.AppendUint32(end, uint32(cdSize))
	end = le.AppendUint32(end, uint32(cdOff))
	end = le.AppendUint16(end, 0)
	cd.Write(end)
	_, err := cw.Write(cd.Bytes())
	return err
}

func (e *npzEntry) method() uint16 {
	if e.deflate {
		return methodDeflate
	}
	return methodStore
}

// nameFlags returns the general-purpose flags Python's zipfile writes for
// a name: bit 11 (UTF-8) when it is not ASCII.
func nameFlags(name string) uint16 {
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return 1 << 11
		}
	}
	return 0
}

// writeMember writes e's member data to w: the .npy stream, deflated
// unless raw or the member is stored.
func writeMember(ctx context.Context, w io.Writer, e *npzEntry, bud *budget, raw bool) error {
	if raw || !e.deflate {
		return writeNPY(ctx, w, e.plan, bud)
	}
	fw, err := flate.NewWriter(w, flate.DefaultCompression)
	if err != nil {
		return err
	}
	if err := writeNPY(ctx, fw, e.plan, bud); err != nil {
		return err
	}
	return fw.Close()
}
