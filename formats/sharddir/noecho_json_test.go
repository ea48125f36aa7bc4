package sharddir

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestLayoutJSONNeverEchoes: the layout attribute comes from a source
// snapshot (hostile). Write refuses a layout with the marker as a key, as
// a value of the wrong type, as the offending syntax byte or inside the
// recorded index metadata naming the attribute and the check, never
// quoting the marker; so does MarshalIndex for metadata that is not an
// object, and ParseIndex for an index file.
func TestLayoutJSONNeverEchoes(t *testing.T) {
	for _, e := range []string{testutil.EvilMarker, strings.ReplaceAll(testutil.EvilMarkerEsc, "\x1b", `\u001b`)} {
		for _, c := range []struct{ name, layout, want string }{
			{"unknown key", `{"v":1,"kind":"plain","files":[],"` + e + `":1}`, "attribute is not a layout: unknown key ("},
			{"syntax", `{"v":1,"kind":` + e + `}`, "attribute is not a layout: malformed JSON at byte 14"},
			{"type", `{"v":1,"kind":"plain","files":[{"name":["` + e + `"]}]}`, "attribute is not a layout: wrong JSON type for files.name at byte "},
			{"attrs type", `{"v":1,"kind":"plain","files":[{"name":"a","attrs":{"k":["` + e + `"]}}]}`, "attribute is not a layout: wrong JSON type for files.attrs at byte "},
			{"truncated", `{"v":1,"kind":"` + e, "attribute is not a layout: truncated JSON"},
			{"metadata not an object", `{"v":1,"kind":"index","index":"` + hfIdx + `","metadata":["` + e + `"],"files":[{"name":"` + shard1 + `","codec":"safetensors"},{"name":"` + shard2 + `","codec":"safetensors"}]}`, "metadata: wrong JSON type at byte 1 (array, want map[string]json.RawMessage)"},
		} {
			s := open(t, makeHF(t)).Snapshot
			s.Attrs[AttrLayout] = c.layout
			_, err := Write(context.Background(), filepath.Join(t.TempDir(), "out"), s, WriteOptions{Codecs: registry()})
			if err == nil {
				t.Errorf("%s: written", c.name)
				continue
			}
			msg := err.Error()
			if p, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: error quotes the layout (%q): %s", c.name, p, msg)
			}
			if !strings.Contains(msg, AttrLayout) || !strings.Contains(msg, c.want) {
				t.Errorf("%s: %s\nwant it to name %s and contain %q", c.name, msg, AttrLayout, c.want)
			}
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Errorf("%s: %v is not ErrInvalidSnapshot", c.name, err)
			}
		}

		_, err := MarshalIndex([]byte(`{"a":`+e+`}`), map[string]string{"t": "s.safetensors"})
		if err == nil || !strings.Contains(err.Error(), "metadata: malformed JSON at byte 5") {
			t.Errorf("MarshalIndex: %v, want metadata: malformed JSON at byte 5", err)
		} else if p, ok := testutil.EchoesEvil(err.Error()); ok {
			t.Errorf("MarshalIndex: error quotes the metadata (%q): %v", p, err)
		}

		for name, idx := range map[string]string{
			"index metadata syntax": `{"metadata":{"a":` + e + `},"weight_map":{"t":"s.safetensors"}}`,
			"index key syntax":      `{` + e + `:1}`,
			"index truncated":       `{"weight_map":{"` + e,
		} {
			_, err := ParseIndex("model.safetensors.index.json", []byte(idx), Limits{})
			if err == nil {
				t.Errorf("%s: parsed", name)
				continue
			}
			msg := err.Error()
			if p, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: error quotes the index (%q): %s", name, p, msg)
			}
			if !strings.Contains(msg, "model.safetensors.index.json: offset ") || !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: %s does not name the file and offset, or is not ErrCorrupt", name, msg)
			}
		}
	}
}
