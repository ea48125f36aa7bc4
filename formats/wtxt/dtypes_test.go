package wtxt

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// TestNewDTypes: the fp8 and complex dtypes of profile §6 are written
// under their names with tensor_ext in the cap line, decode and verify
// to the same bytes, and a file naming a dtype the verifier does not
// know (here an fp8 variant outside §6) is refused as grammar.
func TestNewDTypes(t *testing.T) {
	for _, dt := range []snapshot.DType{snapshot.F8E4M3, snapshot.F8E5M2, snapshot.F8E8M0, snapshot.C64, snapshot.C128} {
		t.Run(dt.String(), func(t *testing.T) {
			s := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{randArray(uint64(dt), "w", dt, 5, 3)}}
			data, _ := encodeBytes(t, s, EncodeOptions{})
			if !bytes.Contains(data, []byte(" dtype="+dt.String()+" shape=5,3 ")) {
				t.Fatalf("no arr line with dtype=%s", dt)
			}
			if cap := capLine(t, data); !strings.Contains(cap, "tensor_ext") {
				t.Fatalf("cap line %q lacks tensor_ext", cap)
			}
			got, err := New().Decode(context.Background(), bytes.NewReader(data), int64(len(data)), decodeOpts())
			if err != nil {
				t.Fatal(err)
			}
			a := got.Array("w")
			x, _ := snapshot.ReadAll(s.Arrays[0].Data)
			y, err := snapshot.ReadAll(a.Data)
			if err != nil || a.DType != dt || !bytes.Equal(x, y) || len(y) != 15*dt.Size() {
				t.Fatalf("decoded %s %v: %d bytes (%v)", a.DType, a.Shape, len(y), err)
			}
			if _, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			// An unknown dtype of the same size: refused, never guessed.
			bad := bytes.Replace(data, []byte(" dtype="+dt.String()+" "), []byte(" dtype=f8e4m3fnuz "), 1)
			_, err = New().Decode(context.Background(), bytes.NewReader(bad), int64(len(bad)), decodeOpts())
			var we *Error
			if !errors.As(err, &we) || we.Check != CheckGrammar {
				t.Fatalf("unknown dtype: %v, want a grammar error", err)
			}
		})
	}
}

func capLine(t *testing.T, data []byte) string {
	for _, l := range strings.Split(string(data[:min(len(data), 4096)]), "\n") {
		if strings.HasPrefix(l, "cap ") {
			return l
		}
	}
	t.Fatal("no cap line")
	return ""
}
