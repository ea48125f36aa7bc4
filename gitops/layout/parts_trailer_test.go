package layout

import (
	"bytes"
	"errors"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// TestSplitRefusesBytesAfterEnd: Split cuts a WTXT at the offsets
// wtxt.ReadIndex reports (the trailer part starts at Index.TrailerStart).
// Bytes after endwtxt make a file invalid WTXT: the verifier refuses them,
// and so does ReadIndex, at the same line with the same check, so Split
// refuses them with that located error, with and without arrays. (The
// trailer offset Split once computed from the file size let a file without
// arrays through, its header part cut inside the endwtxt line.)
func TestSplitRefusesBytesAfterEnd(t *testing.T) {
	empty, _ := genWTXT(3, "", nil)
	for name, good := range map[string][]byte{"arrays": bigWTXT(4), "no arrays": empty} {
		_, parts := splitToMap(t, good, MinPartLimit)
		if string(parts["9999-trailer.part"]) != "endwtxt\n" {
			t.Fatalf("%s: trailer part %q", name, parts["9999-trailer.part"])
		}
		lines := bytes.Count(good, []byte("\n"))
		for _, tc := range []struct {
			tail  string
			check wtxt.Check
		}{{"x\n", wtxt.CheckGrammar}, {"endwtxt\n", wtxt.CheckGrammar}, {"\n", wtxt.CheckGrammar}, {"x", wtxt.CheckText}} {
			data := append(bytes.Clone(good), tc.tail...)
			_, err := SplitParts(t.Context(), bytes.NewReader(data), int64(len(data)), MinPartLimit, func(Part, []byte) error { return nil })
			var we *wtxt.Error
			if !errors.Is(err, ErrParts) || !errors.As(err, &we) || we.Line != lines+1 || we.Check != tc.check {
				t.Fatalf("%s + %q: Split: %v, want ErrParts and a %s error at line %d", name, tc.tail, err, tc.check, lines+1)
			}
			_, verr := wtxt.Verify(t.Context(), bytes.NewReader(data), wtxt.VerifyOptions{AllowUnsigned: true})
			var ve *wtxt.Error
			if !errors.As(verr, &ve) || ve.Line != we.Line || ve.Check != we.Check {
				t.Fatalf("%s + %q: the verifier says %v, ReadIndex %v", name, tc.tail, verr, err)
			}
		}
	}
}
