package torch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestVerbatim: a checkpoint whose pickle names globals outside the
// allowlist decodes (without Strict) to its bytes as one u8 array, marked
// and listing the unknown globals by key path, plus each tensor it holds
// as a derived array; Encode writes the bytes back exactly; Strict
// refuses it naming the key path, without an offset.
func TestVerbatim(t *testing.T) {
	var p pickler
	p.op(0x80, 2, '}')
	p.str("scheduler")
	p.op('}')
	p.str("anneal_func")
	p.global("torch.optim.lr_scheduler", "_cosine_anneal")
	p.op('s', 's', '.')
	anneal := ckptZip(t, p.buf.Bytes(), nil)
	rng, err := os.ReadFile("testdata/trainer/rng_state.pth")
	if err != nil {
		t.Fatal(err)
	}
	args, err := os.ReadFile("testdata/trainer/training_args.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		b          []byte
		unknown    string
		derived    []string
		strictMsg  string
	}{
		{"anneal_func", "ckpt/scheduler.pt", anneal, `[["scheduler.anneal_func","torch.optim.lr_scheduler._cosine_anneal"]]`, nil,
			`key path "scheduler.anneal_func": global torch.optim.lr_scheduler._cosine_anneal is not allowed`},
		{"rng_state", "rng_state.pth", rng, `[["numpy.1","numpy._core.multiarray._reconstruct"],["numpy.1.0","numpy.ndarray"],["numpy.1.2","numpy.dtype"]]`, []string{"cpu"},
			`key path "numpy.1": global numpy._core.multiarray._reconstruct is not allowed`},
		{"training_args", "training_args.bin", args, `[[".","transformers.training_args.TrainingArguments"]]`, nil,
			`key path ".": global transformers.training_args.TrainingArguments is not allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Codec{}
			s, err := c.Decode(context.Background(), snapshot.Bytes(tc.b), int64(len(tc.b)), formats.DecodeOptions{Name: tc.file})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, a := range s.Arrays {
				names = append(names, a.Name)
				if a.Name == VerbatimName {
					base := tc.file[strings.LastIndexByte(tc.file, '/')+1:]
					if a.Attrs[AttrVerbatim] != "1" || a.Attrs[AttrUnknown] != tc.unknown || a.Attrs[AttrFile] != base || a.DType != snapshot.U8 {
						t.Errorf("verbatim array %s %v", a.DType, a.Attrs)
					}
					continue
				}
				if a.Attrs[AttrDerived] != "1" {
					t.Errorf("%s: not marked derived: %v", a.Name, a.Attrs)
				}
			}
			want := append(append([]string{}, tc.derived...), VerbatimName)
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Fatalf("arrays %v, want %v", names, want)
			}
			if _, ok := s.Attrs[AttrTree]; ok {
				t.Errorf("a verbatim checkpoint has a %s", AttrTree)
			}
			var out bytes.Buffer
			if err := c.Encode(context.Background(), &out, s, formats.EncodeOptions{}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), tc.b) {
				t.Fatalf("encoded %d bytes differ from the %d-byte original", out.Len(), len(tc.b))
			}
			_, err = c.Decode(context.Background(), snapshot.Bytes(tc.b), int64(len(tc.b)), formats.DecodeOptions{Name: tc.file, Strict: true})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.strictMsg) || strings.Contains(err.Error(), "offset") ||
				strings.Count(err.Error(), "torch:") != 1 {
				t.Fatalf("strict: %v", err)
			}
		})
	}
}

// TestVerbatimEncodeChecks: Encode refuses a verbatim array that is not
// one-dimensional u8, two of them, and arrays neither verbatim nor
// derived beside one.
func TestVerbatimEncodeChecks(t *testing.T) {
	v := func(name string, dt snapshot.DType, shape ...int64) *snapshot.Array {
		n, _ := snapshot.NumElements(shape)
		return &snapshot.Array{Name: name, DType: dt, Shape: shape, Data: snapshot.Bytes(make([]byte, n*int64(dt.Size()))),
			Attrs: map[string]string{AttrVerbatim: "1"}}
	}
	plain := &snapshot.Array{Name: "w", DType: snapshot.F32, Shape: []int64{1}, Data: snapshot.Bytes(make([]byte, 4))}
	for name, arrays := range map[string][]*snapshot.Array{
		"f32":         {v("a", snapshot.F32, 2)},
		"2-d":         {v("a", snapshot.U8, 2, 2)},
		"two":         {v("a", snapshot.U8, 2), v("b", snapshot.U8, 2)},
		"not derived": {v("a", snapshot.U8, 2), plain},
	} {
		s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: arrays}
		err := (&Codec{}).Encode(context.Background(), &bytes.Buffer{}, s, formats.EncodeOptions{Lossy: true})
		if !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSkeleton: a zip checkpoint torch wrote comes back byte for byte
// through its torch.skeleton; with an array's bytes changed Encode writes
// its own layout (the change kept); a file Encode wrote gets no skeleton.
func TestSkeleton(t *testing.T) {
	files, _ := filepath.Glob("testdata/torch2/*.pt")
	files = append(files, "testdata/trainer/scheduler.pt")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := &Codec{}
		s, err := c.Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: f})
		if err != nil || s.Attrs[AttrSkeleton] == "" {
			continue
		}
		n++
		var out bytes.Buffer
		if err := c.Encode(context.Background(), &out, s, formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), b) {
			t.Fatalf("%s: not restored byte for byte", f)
		}
		if len(s.Arrays) == 0 {
			continue
		}
		a := s.Arrays[0]
		data, _ := snapshot.ReadAll(a.Data)
		data[0] ^= 1
		a.Data = snapshot.Bytes(data)
		out.Reset()
		if err := c.Encode(context.Background(), &out, s, formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(out.Bytes(), b) {
			t.Fatalf("%s: edited array ignored", f)
		}
		back, err := c.Decode(context.Background(), snapshot.Bytes(out.Bytes()), int64(out.Len()), formats.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := back.Attrs[AttrSkeleton]; ok {
			t.Errorf("%s: Encode's own file has a skeleton", f)
		}
		got, _ := snapshot.ReadAll(back.Arrays[0].Data)
		if !bytes.Equal(got, data) {
			t.Errorf("%s: edit lost", f)
		}
	}
	if n < 2 {
		t.Fatalf("only %d fixtures have a skeleton", n)
	}
}
