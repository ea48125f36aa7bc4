package fold

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestSTENJSONNeverEchoes: a FOLD chunk's embedded safetensors header is
// file content. Its JSON failures name the part (header, __metadata__,
// tensor) and the check with a byte offset, never the marker.
func TestSTENJSONNeverEchoes(t *testing.T) {
	for _, e := range []string{testutil.EvilMarker, strings.ReplaceAll(testutil.EvilMarkerEsc, "\x1b", `\u001b`)} {
		for _, c := range []struct{ name, hdr, want string }{
			{"syntax", `{"a":` + e + `}`, "safetensors header: malformed JSON at byte 13"},
			{"key syntax", `{` + e + `:1}`, "safetensors header: malformed JSON at byte 9"},
			{"top type", `["` + e + `"]`, "safetensors header: wrong JSON type at byte "},
			{"truncated", `{"a":"` + e, "safetensors header: truncated JSON"},
			{"metadata type", `{"__metadata__":{"k":["` + e + `"]}}`, "safetensors __metadata__ (offsets in the value): wrong JSON type at byte "},
			{"entry type", `{"a":{"dtype":["` + e + `"]}}`, `safetensors tensor "a" (offsets in its entry): wrong JSON type for dtype at byte `},
		} {
			p := binary.LittleEndian.AppendUint64(nil, uint64(len(c.hdr)))
			p = append(p, c.hdr...)
			_, err := parseSTEN(p)
			if err == nil {
				t.Errorf("%s: parsed", c.name)
				continue
			}
			msg := err.Error()
			if q, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: error quotes the header (%q): %s", c.name, q, msg)
			}
			if !strings.HasPrefix(msg, c.want) {
				t.Errorf("%s: %s\nwant it to start with %q", c.name, msg, c.want)
			}
		}
	}
}
