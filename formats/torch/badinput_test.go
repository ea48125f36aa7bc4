package torch

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

// member of a hand-made zip.
type zmember struct {
	name    string
	data    []byte
	deflate bool
}

func makeZip(t *testing.T, ms ...zmember) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range ms {
		method := zip.Store
		if m.deflate {
			method = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: m.name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(m.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tensorPickle is data.pkl of {"x": tensor} viewing storage "0".
func tensorPickle(class string, numel, offset int64, size, stride []int64) []byte {
	var p pickler
	p.op(0x80, 2, '}')
	p.str("x")
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op('(', '(')
	p.str("storage")
	p.global("torch", class)
	p.str("0")
	p.str("cpu")
	p.int(numel)
	p.op('t', 'Q')
	p.int(offset)
	p.ints(size)
	p.ints(stride)
	p.op(0x89)
	p.global("collections", "OrderedDict")
	p.op(')', 'R', 't', 'R', 's', '.')
	return p.buf.Bytes()
}

func ckptZip(t *testing.T, pkl []byte, storage []byte) []byte {
	return makeZip(t, zmember{name: "archive/data.pkl", data: pkl}, zmember{name: "archive/data/0", data: storage},
		zmember{name: "archive/version", data: []byte("3\n")})
}

func decodeErr(t *testing.T, b []byte) error {
	t.Helper()
	return decodeErrOpts(t, b, formats.DecodeOptions{Name: "bad.pt"})
}

// decodeStrict is decodeErr with DecodeOptions.Strict.
func decodeStrict(t *testing.T, b []byte) error {
	t.Helper()
	return decodeErrOpts(t, b, formats.DecodeOptions{Name: "bad.pt", Strict: true})
}

func decodeErrOpts(t *testing.T, b []byte, opts formats.DecodeOptions) error {
	t.Helper()
	c := &Codec{}
	s, err := c.Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), opts)
	if err == nil {
		// Reading every array must not fail either then.
		for _, a := range s.Arrays {
			if _, err := snapshot.ReadAll(a.Data); err != nil {
				t.Fatalf("%s: decoded but unreadable: %v", a.Name, err)
			}
		}
		return nil
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "torch: bad.pt: ") {
		t.Errorf("error is not one located line: %q", msg)
	}
	return err
}

func TestRefusals(t *testing.T) {
	f32 := make([]byte, 40)
	legacyHead := append(append([]byte{}, legacyMagic...), '.', 0x80, 2, 'M', 0xe9, 0x03, '.')
	var deep bytes.Buffer
	deep.WriteString("\x80\x02")
	for i := 0; i < 5000; i++ {
		deep.WriteByte(']')
	}
	for i := 0; i < 4999; i++ {
		deep.WriteByte('a')
	}
	deep.WriteByte('.')
	var dag bytes.Buffer // l = []; 80 times: l = [l, l]  (2^80 paths)
	dag.WriteString("\x80\x02]")
	for i := 0; i < 80; i++ {
		dag.WriteString("q\x000](h\x00h\x00e") // memo[0] = l; pop it; push [l, l]
	}
	dag.WriteByte('.')
	var memo bytes.Buffer
	memo.WriteString("\x80\x02N")
	for i := 0; i <= pickle.DefaultMaxMemo; i++ {
		memo.Write([]byte{'r', byte(i), byte(i >> 8), byte(i >> 16), 0})
	}
	memo.WriteByte('.')
	var marks bytes.Buffer
	marks.WriteString("\x80\x02")
	marks.Write(bytes.Repeat([]byte{'('}, 2000))

	cases := []struct {
		name string
		file []byte
		want error
		msg  string
	}{
		{"os.system via REDUCE", ckptZip(t, []byte("\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R."), nil), ErrRefused, "global os.system is not allowed"},
		{"builtins.eval via STACK_GLOBAL", ckptZip(t, []byte("\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x011\x85R."), nil), ErrRefused, "global builtins.eval"},
		{"copy_reg._reconstructor", ckptZip(t, []byte("\x80\x02ccopy_reg\n_reconstructor\n."), nil), ErrRefused, "copy_reg._reconstructor"},
		{"legacy posix.system", append(append([]byte{}, legacyHead...), []byte("}.\x80\x02cposix\nsystem\n.")...), ErrRefused, "posix.system"},
		{"INST opcode", ckptZip(t, []byte("\x80\x02(ios\nsystem\n."), nil), ErrRefused, "opcode 0x69"},
		{"sparse tensor", ckptZip(t, []byte("\x80\x02ctorch._utils\n_rebuild_sparse_tensor\n."), nil), ErrUnsupported, "_rebuild_sparse_tensor"},
		{"storage shorter than the view", ckptZip(t, tensorPickle("FloatStorage", 10, 4, []int64{2, 4}, []int64{4, 1}), f32), ErrCorrupt, "reaches element 11"},
		{"member shorter than its persistent id", ckptZip(t, tensorPickle("FloatStorage", 11, 0, []int64{10}, []int64{1}), f32), ErrCorrupt, "member holds 40 bytes"},
		{"shape x stride overflow", ckptZip(t, tensorPickle("FloatStorage", 10, 0, []int64{1 << 40, 1 << 40}, []int64{1 << 30, 1}), f32), ErrCorrupt, "overflow"},
		{"element count overflow", ckptZip(t, tensorPickle("FloatStorage", 10, 0, []int64{1 << 62, 8}, []int64{0, 0}), f32), ErrCorrupt, "overflow"},
		{"stride-0 expansion beyond the budget", ckptZip(t, tensorPickle("FloatStorage", 10, 0, []int64{1 << 40}, []int64{0}), f32), ErrLimit, "budget"},
		{"deflated storage", makeZip(t, zmember{name: "archive/data.pkl", data: tensorPickle("FloatStorage", 10, 0, []int64{10}, []int64{1})}, zmember{name: "archive/data/0", data: f32, deflate: true}), ErrCorrupt, "compression method 8"},
		{"missing storage member", makeZip(t, zmember{name: "archive/data.pkl", data: tensorPickle("FloatStorage", 10, 0, []int64{10}, []int64{1})}), ErrCorrupt, "no member data/<key>"},
		{"no data.pkl", makeZip(t, zmember{name: "archive/x", data: f32}), ErrCorrupt, "data.pkl"},
		{"deep nesting", ckptZip(t, deep.Bytes(), nil), ErrLimit, "nested deeper"},
		{"shared-reference blow-up", ckptZip(t, dag.Bytes(), nil), ErrLimit, "expands to more than"},
		{"huge memo", ckptZip(t, memo.Bytes(), nil), ErrLimit, "memo"},
		{"MARK bomb", ckptZip(t, marks.Bytes(), nil), ErrLimit, "MARK"},
		{"self-containing list", ckptZip(t, []byte("\x80\x02]q\x00h\x00a."), nil), ErrCorrupt, "contains itself"},
		{"unhashable key", ckptZip(t, []byte("\x80\x02}]Ns."), nil), ErrCorrupt, "unhashable"},
		{"not a checkpoint", []byte("hello world, this is not a checkpoint"), ErrCorrupt, "magic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeStrict(t, tc.file)
			if tc.want == nil {
				t.Logf("%v", err)
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tc.want, tc.msg)
			}
			if strings.Contains(tc.name, "system") && (!strings.Contains(err.Error(), `key path "."`) || strings.Contains(err.Error(), "offset")) {
				t.Errorf("want the key path and no offset in %v", err)
			}
		})
	}
}

// TestTruncatedAndFlipped: every prefix of a fixture, and every byte of it
// flipped, is decoded or refused without a panic, and decoded arrays are
// readable.
func TestTruncatedAndFlipped(t *testing.T) {
	for _, f := range []string{"testdata/mixed_views.pt", "testdata/state_dict_legacy.pt"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(b); n += 7 {
			if err := decodeErr(t, b[:n]); err == nil && n < len(b)-22 {
				t.Fatalf("%s cut at %d decoded", f, n)
			}
		}
		for i := 0; i < len(b); i += 3 {
			c := append([]byte{}, b...)
			c[i] ^= 0x5a
			decodeErr(t, c)
		}
	}
}

// TestLyingSizes: a central directory entry claiming more bytes than the
// file holds is refused naming the member.
func TestLyingSizes(t *testing.T) {
	b, err := os.ReadFile("testdata/state_dict.pt")
	if err != nil {
		t.Fatal(err)
	}
	name := []byte("state_dict/data/0")
	i := -1
	for j := 0; j+46+len(name) <= len(b); j++ {
		if bytes.HasPrefix(b[j:], []byte("PK\x01\x02")) && bytes.Equal(b[j+46:j+46+len(name)], name) {
			i = j
			break
		}
	}
	if i < 0 {
		t.Fatal("central directory entry not found")
	}
	for _, off := range []int{20, 24} { // compressed, uncompressed size
		copy(b[i+off:], []byte{0xff, 0xff, 0xff, 0x7f})
	}
	err = decodeErr(t, b)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `zip member "state_dict/data/0"`) || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("got %v", err)
	}
}
