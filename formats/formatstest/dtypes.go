package formatstest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// RefusesDTypes checks that c's Encode refuses an array of each of dts
// with a formats.DTypeError naming the array, the dtype and the codec
// (matching formats.ErrLossy) and writes nothing, and that with Lossy it
// drops exactly that array, reports it through EncodeOptions.Lost, and
// writes a file that decodes to the other arrays.
func RefusesDTypes(t *testing.T, c formats.Codec, keep *snapshot.Array, dts ...snapshot.DType) {
	t.Helper()
	for _, dt := range dts {
		bad := &snapshot.Array{Name: "t9", DType: dt, Shape: []int64{2, 2}, Data: snapshot.Bytes(make([]byte, 4*dt.Size()))}
		s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: []*snapshot.Array{keep, bad}}
		var buf bytes.Buffer
		err := c.Encode(context.Background(), &buf, s, formats.EncodeOptions{})
		var de *formats.DTypeError
		if !errors.As(err, &de) || de.Array != "t9" || de.DType != dt || !errors.Is(err, formats.ErrLossy) ||
			!strings.Contains(err.Error(), `array "t9": dtype `+dt.String()+" has no "+de.Format) || buf.Len() != 0 {
			t.Fatalf("%s: encode %s: %v (%d bytes written), want a DTypeError naming t9", c.Name(), dt, err, buf.Len())
		}
		var lost []formats.Loss
		err = c.Encode(context.Background(), &buf, s, formats.EncodeOptions{Lossy: true, Lost: func(l formats.Loss) { lost = append(lost, l) }})
		if err != nil {
			t.Fatalf("%s: lossy encode %s: %v", c.Name(), dt, err)
		}
		if len(lost) != 1 || lost[0].Array != "t9" || !strings.Contains(lost[0].String(), "array dropped (dtype "+dt.String()+")") {
			t.Fatalf("%s: lossy %s reported %v", c.Name(), dt, lost)
		}
		back, err := c.Decode(context.Background(), snapshot.Bytes(buf.Bytes()), int64(buf.Len()), formats.DecodeOptions{})
		if err != nil || len(back.Arrays) != 1 || back.Arrays[0].DType != keep.DType {
			t.Fatalf("%s: lossy output: %v", c.Name(), err)
		}
	}
}
