package formats_test

import (
	"context"
	"encoding/binary"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/aero"
	"github.com/snapd-ml/snapd/formats/fold"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/formats/ztensor"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// evilJSON is the marker as JSON text can carry it: raw (a hostile byte
// for a syntax error) and as the content of a string (the escape
// sequence as \u001b, which encoding/json decodes to the real byte).
func evilJSON() []string {
	return []string{testutil.EvilMarker, strings.ReplaceAll(testutil.EvilMarkerEsc, "\x1b", `\u001b`)}
}

// jsonForms are hostile JSON texts carrying the marker e for a target
// that wants a list (of strings or numbers) or an object of strings, with
// the check the error must name: a syntax error's and a truncated text's
// are jsonerr's; a well-formed value of the wrong shape is refused by
// encoding/json ("wrong JSON type") or by the codec's own check of the
// value ("" here: any check, the attribute named).
func jsonForms(e string) map[string][2]string {
	return map[string][2]string{
		"syntax byte":          {`[` + e + `]`, "malformed JSON at byte 1"},
		"syntax byte in a key": {`{` + e + `:1}`, "malformed JSON at byte 1"},
		"string where a list":  {`"` + e + `"`, ""},
		"list of strings":      {`["` + e + `"]`, ""},
		"object with the key":  {`{"` + e + `":["` + e + `"]}`, ""},
		"truncated string":     {`["` + e, "truncated JSON"},
	}
}

// TestEncodeJSONAttrErrorsNeverEcho: attributes holding JSON come from a
// (hostile) source file. An encoder that refuses one names the attribute
// and the failed check (encoding/json's, described by jsonerr: the byte
// offset and the kind of failure), never the attribute's bytes: no part
// of the marker, whether it sits in a key, in a value of the wrong type
// or is the offending syntax byte.
func TestEncodeJSONAttrErrorsNeverEcho(t *testing.T) {
	ctx := context.Background()
	type target struct {
		codec   formats.Codec
		attr    string            // the attribute holding the hostile JSON
		array   bool              // an array attribute (else the snapshot's)
		other   map[string]string // other attributes the path needs
		dtype   snapshot.DType
		accepts []string // forms that are a valid value of the attribute
	}
	sparse := map[string]string{"ztensor.role": "values", "ztensor.name": "t", "ztensor.format": "sparse_coo", "ztensor.dtype": "float32"}
	targets := []target{
		{codec: ztensor.New(), attr: "ztensor.attributes"},
		{codec: ztensor.New(), attr: "ztensor.order", accepts: []string{"list of strings"}},
		{codec: ztensor.New(), attr: "ztensor.shape", array: true, other: sparse},
		{codec: safetensors.New(), attr: safetensors.AttrMetadata},
		{codec: safetensors.New(), attr: safetensors.AttrShape, array: true, other: map[string]string{safetensors.AttrDType: "F8_E4M3"}, dtype: snapshot.U8},
		{codec: aero.New(), attr: "aero.order", accepts: []string{"list of strings"}},
		{codec: aero.New(), attr: "aero.shape", array: true, other: map[string]string{"aero.dtype": "1"}, dtype: snapshot.U8},
		{codec: aero.New(), attr: "aero.chunks"},
		{codec: aero.New(), attr: "aero.extra", array: true, accepts: []string{"object with the key"}},
		{codec: aero.New(), attr: "aero.mmsg", accepts: []string{"string where a list", "list of strings", "object with the key"}},
		{codec: torch.New(), attr: torch.AttrTree},
		{codec: fold.New(), attr: fold.AttrChunks, other: map[string]string{fold.AttrIndex: `{}`}},
	}
	for _, tg := range targets {
		for _, e := range evilJSON() {
			for form, fc := range jsonForms(e) {
				if slices.Contains(tg.accepts, form) {
					continue
				}
				v, check := fc[0], fc[1]
				name := tg.codec.Name() + " " + tg.attr + " " + form
				attrs := map[string]string{tg.attr: v}
				for k, ov := range tg.other {
					attrs[k] = ov
				}
				dt := tg.dtype
				if dt == snapshot.Invalid {
					dt = snapshot.F32
				}
				s := &snapshot.Snapshot{
					Meta:   snapshot.Meta{Schema: "s", Gen: 1, Build: "b", Host: "h", Cuda: "c"},
					Arrays: []*snapshot.Array{{Name: "t0", DType: dt, Shape: []int64{4}, Data: snapshot.Bytes(make([]byte, 4*dt.Size()))}},
				}
				if tg.array {
					s.Arrays[0].Attrs = attrs
				} else {
					s.Attrs = attrs
				}
				err := tg.codec.Encode(ctx, io.Discard, s, formats.EncodeOptions{})
				if err == nil {
					t.Errorf("%s: encoded", name)
					continue
				}
				msg := err.Error()
				if p, ok := testutil.EchoesEvil(msg); ok {
					t.Errorf("%s: error quotes the attribute (%q): %s", name, p, msg)
				}
				if !strings.Contains(msg, tg.attr) {
					t.Errorf("%s: %s does not name the attribute", name, msg)
				}
				if !strings.Contains(msg, check) {
					t.Errorf("%s: %s does not name the check (%s)", name, msg, check)
				}
			}
		}
	}
}

// TestSafetensorsHeaderJSONNeverEchoes: a safetensors header whose JSON
// carries the marker as a key, a value of the wrong type, the offending
// syntax byte, inside __metadata__ or a tensor entry: the error names the
// file, the tensor (a name the format defines) and a byte offset, and
// quotes none of the marker.
func TestSafetensorsHeaderJSONNeverEchoes(t *testing.T) {
	ctx := context.Background()
	for _, e := range evilJSON() {
		for name, hdr := range map[string]string{
			"entry syntax":     `{"a":{"dtype":` + e + `}}`,
			"entry key syntax": `{"a":{` + e + `:1}}`,
			"dtype type":       `{"a":{"dtype":["` + e + `"],"shape":[1],"data_offsets":[0,1]}}`,
			"shape type":       `{"a":{"dtype":"U8","shape":["` + e + `"],"data_offsets":[0,1]}}`,
			"shape syntax":     `{"a":{"dtype":"U8","shape":[1` + e + `],"data_offsets":[0,1]}}`,
			"offsets type":     `{"a":{"dtype":"U8","shape":[1],"data_offsets":{"` + e + `":1}}}`,
			"unknown field":    `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"` + e + `":1}}`,
			"metadata syntax":  `{"__metadata__":{"k":` + e + `}}`,
			"metadata type":    `{"__metadata__":{"k":["` + e + `"]}}`,
			"metadata key":     `{"__metadata__":{` + e + `:"v"}}`,
			"top syntax":       `{` + e + `}`,
			"after key":        `{"a" ` + e + `}`,
			"truncated":        `{"a":{"dtype":"` + e,
		} {
			b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
			b = append(append(b, hdr...), 0)
			_, err := safetensors.New().Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "m.safetensors"})
			if err == nil {
				t.Errorf("%s: decoded", name)
				continue
			}
			msg := err.Error()
			if p, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: error quotes the header (%q): %s", name, p, msg)
			}
			if r, ok := testutil.EchoedRun(msg, b); ok {
				t.Errorf("%s: error quotes the header (%q): %s", name, r, msg)
			}
			if !strings.HasPrefix(msg, "safetensors: m.safetensors: ") || !strings.Contains(msg, "offset ") {
				t.Errorf("%s: %s does not name the file and the offset", name, msg)
			}
		}
	}
}

// TestApplyAttrsNeverEchoes: the attrs document of a WTXT comes from the
// file. An unknown key, a value of the wrong type or a stray byte is
// refused naming the document and the check, never its bytes.
func TestApplyAttrsNeverEchoes(t *testing.T) {
	for _, e := range evilJSON() {
		for name, c := range map[string]struct{ doc, want string }{
			"unknown key":   {`{"v":1,"` + e + `":1}`, "unknown key ("},
			"syntax":        {`{"v":1,"snapshot":` + e + `}`, "malformed JSON at byte 18"},
			"type":          {`{"v":1,"snapshot":{"k":["` + e + `"]}}`, "wrong JSON type for "},
			"version type":  {`{"v":"` + e + `"}`, "wrong JSON type for "},
			"truncated":     {`{"v":1,"snapshot":{"k":"` + e, "truncated JSON"},
			"arrays syntax": {`{"v":1,"arrays":{"t0":{"k":` + e + `}}}`, "malformed JSON at byte 27"},
		} {
			s := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "t0", DType: snapshot.U8, Shape: []int64{1}}}}
			err := snapshot.ApplyAttrs(s, []byte(c.doc))
			if err == nil {
				t.Errorf("%s: applied", name)
				continue
			}
			msg := err.Error()
			if p, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: error quotes the document (%q): %s", name, p, msg)
			}
			if !strings.HasPrefix(msg, snapshot.AttrsArrayName+": ") || !strings.Contains(msg, c.want) {
				t.Errorf("%s: %s, want %s: ...%s...", name, msg, snapshot.AttrsArrayName, c.want)
			}
		}
	}
}
