package numpy

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// npyFile returns a .npy v1.0 file with the given header dict text and
// data.
func npyFile(dict string, data []byte) []byte {
	text := wrapHeader(dict, 1)
	b := append([]byte(npyMagic), 1, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(text)))
	b = append(b, text...)
	return append(b, data...)
}

// zmember describes one member for mkzip; the l* fields override what the
// local header says.
type zmember struct {
	name                string
	method              uint16
	data                []byte // as stored (compressed when deflated)
	crc                 uint32
	usize               uint32
	lcrc, lcsize, lsize *uint32
	headerOff           *uint32 // central directory's offset override
}

func deflate(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func stored(name string, npy []byte) zmember {
	return zmember{name: name, data: npy, crc: crc32.ChecksumIEEE(npy), usize: uint32(len(npy))}
}

func deflated(name string, npy []byte) zmember {
	return zmember{name: name, method: 8, data: deflate(npy), crc: crc32.ChecksumIEEE(npy), usize: uint32(len(npy))}
}

func pick(p *uint32, v uint32) uint32 {
	if p != nil {
		return *p
	}
	return v
}

// mkzip writes a zip archive (no zip64 records) from ms.
func mkzip(ms []zmember) []byte {
	var out, cd bytes.Buffer
	le := binary.LittleEndian
	for _, m := range ms {
		off := uint32(out.Len())
		h := le.AppendUint32(nil, sigLocal)
		h = le.AppendUint16(h, 20)
		h = le.AppendUint16(h, 0)
		h = le.AppendUint16(h, m.method)
		h = le.AppendUint32(h, 0x00210000)
		h = le.AppendUint32(h, pick(m.lcrc, m.crc))
		h = le.AppendUint32(h, pick(m.lcsize, uint32(len(m.data))))
		h = le.AppendUint32(h, pick(m.lsize, m.usize))
		h = le.AppendUint16(h, uint16(len(m.name)))
		h = le.AppendUint16(h, 0)
		out.Write(h)
		out.WriteString(m.name)
		out.Write(m.data)
		c := le.AppendUint32(nil, sigCentral)
		c = le.AppendUint16(c, 0x314)
		c = le.AppendUint16(c, 20)
		c = le.AppendUint16(c, 0)
		c = le.AppendUint16(c, m.method)
		c = le.AppendUint32(c, 0x00210000)
		c = le.AppendUint32(c, m.crc)
		c = le.AppendUint32(c, uint32(len(m.data)))
		c = le.AppendUint32(c, m.usize)
		c = le.AppendUint16(c, uint16(len(m.name)))
		c = append(c, make([]byte, 8)...)
		c = le.AppendUint32(c, 0o600<<16)
		c = le.AppendUint32(c, pick(m.headerOff, off))
		cd.Write(c)
		cd.WriteString(m.name)
	}
	cdOff := out.Len()
	out.Write(cd.Bytes())
	e := le.AppendUint32(nil, sigEOCD)
	e = append(e, 0, 0, 0, 0)
	e = le.AppendUint16(e, uint16(len(ms)))
	e = le.AppendUint16(e, uint16(len(ms)))
	e = le.AppendUint32(e, uint32(cd.Len()))
	e = le.AppendUint32(e, uint32(cdOff))
	e = le.AppendUint16(e, 0)
	out.Write(e)
	return out.Bytes()
}

func u32(v uint32) *uint32 { return &v }

const okDict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"

// TestHostileInput: every malformed or hostile file fails with a located
// *Error wrapping the right sentinel, never echoing file content.
func TestHostileInput(t *testing.T) {
	good := npyFile(okDict, make([]byte, 8))
	// Eight times the decode budget below, deflated to a few KiB.
	bomb := npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (8388608,), }", make([]byte, 8<<20))
	bombZ := deflated("bomb.npy", bomb)
	lying := deflated("a.npy", bomb)
	lying.usize = 4096
	lying.crc = crc32.ChecksumIEEE(bomb[:4096])
	badCRC := stored("a.npy", good)
	badCRC.crc ^= 1
	bigV2 := append([]byte(npyMagic), 2, 0)
	bigV2 = binary.LittleEndian.AppendUint32(bigV2, 1<<24)
	bigV2 = append(bigV2, make([]byte, 100)...)
	cases := []struct {
		name     string
		npz      bool
		raw      []byte
		sentinel error
		want     string // in the message
	}{
		{"short", false, []byte("\x93NUMPY"), ErrCorrupt, "at least 10"},
		{"magic", false, []byte("\x93NUMPX\x01\x00\x00\x00xx"), ErrCorrupt, "magic"},
		{"version", false, append([]byte(npyMagic), 4, 0, 0, 0), ErrUnsupported, "version 4.0"},
		{"header length past end", false, append([]byte(npyMagic), 1, 0, 0xff, 0), ErrCorrupt, "header length 255"},
		{"header over limit", false, bigV2, ErrLimit, "exceeds the limit"},
		{"truncated data", false, good[:len(good)-1], ErrCorrupt, "needs 8 bytes"},
		{"trailing bytes", false, append(append([]byte(nil), good...), 0), ErrCorrupt, "1 bytes after the array data"},
		{"shape overflow", false, npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (9223372036854775807, 2), }", nil), ErrLimit, "overflows"},
		{"int overflow", false, npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", nil), ErrCorrupt, "overflows int64"},
		{"structured", false, npyFile("{'descr': [('SECRET', '<f8')], 'fortran_order': False, 'shape': (), }", nil), ErrUnsupported, "structured"},
		{"complex256", false, npyFile("{'descr': '<c32', 'fortran_order': False, 'shape': (), }", nil), ErrUnsupported, "complex of this size"},
		{"unicode", false, npyFile("{'descr': '<U5', 'fortran_order': False, 'shape': (), }", nil), ErrUnsupported, "unicode"},
		{"unknown key", false, npyFile("{'descr': '<f8', 'SECRET': 1, 'fortran_order': False, 'shape': (), }", nil), ErrCorrupt, "not one of"},
		{"unknown descr", false, npyFile("{'descr': '<SECRET', 'fortran_order': False, 'shape': (), }", nil), ErrUnsupported, "dtype kind"},
		{"duplicate key", false, npyFile("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (), }", nil), ErrCorrupt, "duplicate"},
		{"code", false, npyFile("{'descr': __import__('os'), 'fortran_order': False, 'shape': (), }", nil), ErrCorrupt, "quoted string"},
		{"1-tuple without comma", false, npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (1), }", nil), ErrCorrupt, "trailing comma"},
		{"long in v3", false, func() []byte {
			b := npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (1L,), }", make([]byte, 8))
			b[6] = 3
			return append(b[:10:10], append([]byte{0, 0}, b[10:]...)...)
		}(), ErrCorrupt, "plain decimal"},
		{"zip bomb", true, mkzip([]zmember{bombZ}), ErrLimit, "decode budget"},
		{"lying inflated size", true, mkzip([]zmember{lying}), ErrCorrupt, "more than the declared 4096"},
		{"local size lies", true, mkzip([]zmember{func() zmember { m := stored("a.npy", good); m.lsize = u32(5); return m }()}), ErrCorrupt, "local header crc/compressed size/size"},
		{"local crc lies", true, mkzip([]zmember{func() zmember { m := stored("a.npy", good); m.lcrc = u32(5); return m }()}), ErrCorrupt, "local header crc"},
		{"stored sizes differ", true, mkzip([]zmember{func() zmember { m := stored("a.npy", good); m.usize++; return m }()}), ErrCorrupt, "stored member"},
		{"crc", true, mkzip([]zmember{badCRC}), ErrCorrupt, "crc32"},
		{"wrong local name", true, mkzip([]zmember{stored("a.npy", good), func() zmember { m := stored("a.npy", good); m.name = "b.npy"; m.headerOff = u32(0); return m }()}), ErrCorrupt, "local header names another file"},
		{"overlap", true, func() []byte {
			inner := mkzip([]zmember{stored("b.npy", good)})
			a := stored("a.npy", inner[:30+5+len(good)])
			b := stored("b.npy", good)
			b.headerOff = u32(30 + 5)
			return mkzip([]zmember{a, b})
		}(), ErrCorrupt, "overlaps"},
		{"not npy member", true, mkzip([]zmember{stored("SECRET.txt", good)}), ErrUnsupported, "not a .npy file"},
		{"bad npy in member", true, mkzip([]zmember{stored("a.npy", good[:20])}), ErrCorrupt, "header length"},
		{"object in member", true, mkzip([]zmember{deflated("o.npy", npyFile("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", make([]byte, 8)))}), ErrUnsupported, "inflated member offset 20"},
		{"no eocd", true, good, ErrCorrupt, "end of central directory"},
		{"method", true, mkzip([]zmember{func() zmember { m := stored("a.npy", good); m.method = 12; return m }()}), ErrUnsupported, "compression method 12"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Codec{NPZ: tc.npz, Budget: 1 << 20}
			_, err := c.Decode(context.Background(), snapshot.Bytes(tc.raw), int64(len(tc.raw)), formats.DecodeOptions{Name: "in.np", MaxDecoded: 1 << 20})
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want an *Error wrapping %v", err, tc.sentinel)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "in.np") {
				t.Fatalf("message %q lacks %q or the file name", msg, tc.want)
			}
			if strings.Contains(msg, "SECRET") && !strings.Contains(tc.name, "member") {
				t.Fatalf("message echoes file content: %q", msg)
			}
		})
	}
}

// TestBudgetForUnmappedFortran: a Fortran-order array read through a
// reader that is not memory-backed is converted in memory only within the
// budget.
func TestBudgetForUnmappedFortran(t *testing.T) {
	raw := npyFile("{'descr': '<f8', 'fortran_order': True, 'shape': (64, 64), }", make([]byte, 64*64*8))
	r := io.NewSectionReader(bytes.NewReader(raw), 0, int64(len(raw)))
	_, err := Codec{Budget: 1000}.Decode(context.Background(), r, int64(len(raw)), formats.DecodeOptions{})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("got %v", err)
	}
	if _, err := (Codec{}).Decode(context.Background(), r, int64(len(raw)), formats.DecodeOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestEncodeRefusals: what NumPy cannot hold or attributes that lie fail
// before anything is written, naming the array.
func TestEncodeRefusals(t *testing.T) {
	arr := func(name string, dt snapshot.DType, attrs map[string]string) *snapshot.Array {
		return &snapshot.Array{Name: name, DType: dt, Shape: []int64{2}, Data: snapshot.Bytes(make([]byte, 2*dt.Size())), Attrs: attrs}
	}
	cases := []struct {
		name     string
		npz      bool
		s        *snapshot.Snapshot
		sentinel error
	}{
		{"bf16", false, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("h", snapshot.BF16, nil)}}, formats.ErrLossy},
		{"two arrays in npy", false, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.F32, nil), arr("b", snapshot.F32, nil)}}, ErrInvalidSnapshot},
		{"no array in npy", false, &snapshot.Snapshot{}, ErrInvalidSnapshot},
		{"bad version", false, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.F32, map[string]string{AttrVersion: "4.0"})}}, ErrInvalidSnapshot},
		{"big u8", false, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.U8, map[string]string{AttrByteOrder: "big"})}}, ErrInvalidSnapshot},
		{"unknown attr", false, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.U8, map[string]string{"numpy.nope": "1"})}}, ErrInvalidSnapshot},
		{"header lies", false, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.F32, map[string]string{AttrHeader: wrapHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 1)})}}, ErrInvalidSnapshot},
		{"bad order", true, &snapshot.Snapshot{Attrs: map[string]string{AttrOrder: `["a","a"]`}, Arrays: []*snapshot.Array{arr("a", snapshot.F32, nil)}}, ErrInvalidSnapshot},
		{"bad mtime", true, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.F32, map[string]string{AttrZipMTime: "1979-01-01 00:00:00"})}}, ErrInvalidSnapshot},
		{"bad method", true, &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("a", snapshot.F32, map[string]string{AttrZipMethod: "bzip2"})}}, ErrInvalidSnapshot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := encodeBytes(t, Codec{NPZ: tc.npz}, tc.s, false)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want %v", err, tc.sentinel)
			}
			if len(out) != 0 {
				t.Fatalf("wrote %d bytes before failing", len(out))
			}
		})
	}
	// --lossy drops the bf16 array
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("h", snapshot.BF16, nil), arr("f", snapshot.F32, nil)}}
	out, err := encodeBytes(t, Codec{NPZ: true}, s, true)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeBytes(t, Codec{NPZ: true}, out)
	if err != nil || len(back.Arrays) != 1 || back.Arrays[0].Name != "f" {
		t.Fatalf("lossy: %v %v", err, back)
	}
}

// TestDOSTime: every stored MS-DOS date/time round-trips through the
// attribute text.
func TestDOSTime(t *testing.T) {
	for _, v := range [][2]uint16{{0x21, 0}, {0, 0}, {0xffff, 0xffff}, {0x5b78, 0x8421}} {
		s := formatDOSTime(v[0], v[1])
		d, tm, err := parseDOSTime(s)
		if err != nil || d != v[0] || tm != v[1] {
			t.Fatalf("%04x %04x -> %q -> %04x %04x %v", v[0], v[1], s, d, tm, err)
		}
	}
}
