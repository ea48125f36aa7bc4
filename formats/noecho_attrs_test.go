package formats_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/aero"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/stb"
	"github.com/snapd-ml/snapd/formats/ztensor"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestEncodeAttrErrorsNeverEcho: snapshot and array attributes come from
// a (hostile) source file. An encoder that refuses an attribute's value
// names the attribute and the check, never the value: each case sets one
// attribute to a hostile value, and the encoder must refuse it without
// quoting any part of it.
func TestEncodeAttrErrorsNeverEcho(t *testing.T) {
	ctx := context.Background()
	const bad = "\xff\xfe" // not UTF-8
	type tc struct {
		name       string
		codec      formats.Codec
		snapAttrs  map[string]string
		arrayAttrs map[string]string
		arrayName  string
		dtype      snapshot.DType
	}
	var cases []tc
	for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
		cases = append(cases,
			tc{name: "stb order", codec: stb.New(), snapAttrs: map[string]string{stb.AttrOrder: evil}},
			tc{name: "stb id", codec: stb.New(), arrayAttrs: map[string]string{stb.AttrID: evil}},
			tc{name: "stb layout", codec: stb.New(), arrayAttrs: map[string]string{stb.AttrLayout: evil}},
			tc{name: "stb rank", codec: stb.New(), arrayAttrs: map[string]string{stb.AttrRank: evil}},
			tc{name: "stb trailing", codec: stb.New(), arrayAttrs: map[string]string{stb.AttrTrailing: evil}},
			tc{name: "safetensors dtype", codec: safetensors.New(), arrayAttrs: map[string]string{safetensors.AttrDType: evil, safetensors.AttrShape: "[4]"}},
			tc{name: "safetensors shape", codec: safetensors.New(), arrayAttrs: map[string]string{safetensors.AttrDType: "F8_E4M3", safetensors.AttrShape: evil}, dtype: snapshot.U8},
			tc{name: "ztensor version", codec: ztensor.New(), snapAttrs: map[string]string{"ztensor.version": evil}},
			tc{name: "ztensor encoding", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.encoding": evil}},
			tc{name: "ztensor digest", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.digest": evil}},
			tc{name: "ztensor format without role", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.format": evil}},
			tc{name: "ztensor component format", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.role": "values", "ztensor.name": "t", "ztensor.format": evil + bad, "ztensor.dtype": "float32", "ztensor.shape": "[4]"}},
			tc{name: "ztensor component dtype", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.role": "values", "ztensor.name": "t", "ztensor.format": "sparse_coo", "ztensor.dtype": evil, "ztensor.shape": "[4]"}},
			tc{name: "ztensor component shape", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.role": "values", "ztensor.name": "t", "ztensor.format": "sparse_coo", "ztensor.dtype": "float32", "ztensor.shape": evil}},
			tc{name: "ztensor component role", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.role": evil + bad, "ztensor.name": "t", "ztensor.format": "sparse_coo", "ztensor.dtype": "float32", "ztensor.shape": "[4]"}},
			tc{name: "ztensor generator", codec: ztensor.New(), snapAttrs: map[string]string{"ztensor.generator": evil + bad}},
			tc{name: "ztensor tensor name", codec: ztensor.New(), arrayAttrs: map[string]string{"ztensor.name": evil + bad}},
			tc{name: "aero uuid", codec: aero.New(), snapAttrs: map[string]string{"aero.uuid": evil}},
		)
	}
	for _, c := range cases {
		dt := c.dtype
		if dt == snapshot.Invalid {
			dt = snapshot.F32
		}
		name := c.arrayName
		if name == "" {
			name = "t0"
		}
		n := 4 * dt.Size()
		s := &snapshot.Snapshot{
			Meta:   snapshot.Meta{Schema: "s", Gen: 1, Build: "b", Host: "h", Cuda: "c"},
			Attrs:  c.snapAttrs,
			Arrays: []*snapshot.Array{{Name: name, DType: dt, Shape: []int64{int64(n / dt.Size())}, Data: snapshot.Bytes(make([]byte, n)), Attrs: c.arrayAttrs}},
		}
		if dt == snapshot.U8 {
			s.Arrays[0].Shape = []int64{int64(n)}
		}
		err := c.codec.Encode(ctx, io.Discard, s, formats.EncodeOptions{})
		if err == nil {
			t.Errorf("%s: encoded", c.name)
			continue
		}
		if p, ok := testutil.EchoesEvil(err.Error()); ok {
			t.Errorf("%s: error quotes the attribute value (%q): %v", c.name, p, err)
		}
		// The message names the attribute it refuses.
		for _, m := range []map[string]string{c.snapAttrs, c.arrayAttrs} {
			for k, v := range m {
				if !strings.Contains(v, "EVIL") {
					continue
				}
				want := map[string]string{"ztensor.generator": "generator", "ztensor.name": "tensor name"}[k]
				if want == "" {
					want = k
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v does not name %s", c.name, err, want)
				}
			}
		}
	}
}
