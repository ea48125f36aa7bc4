package formats_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestUserMetaStaysInWTXT: a generation's metadata is carried by WTXT
// (deterministically, in the attributes document) and read back, while
// converting the WTXT to the checkpoint format writes the same bytes as
// without it: the metadata never reaches the user's restored file.
func TestUserMetaStaysInWTXT(t *testing.T) {
	ctx := context.Background()
	src := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Attrs: map[string]string{}, Arrays: []*snapshot.Array{
		{Name: "w", DType: snapshot.F32, Shape: []int64{2, 2}, Data: snapshot.Bytes(make([]byte, 16))},
	}}
	var st bytes.Buffer
	if err := safetensors.New().Encode(ctx, &st, src, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	meta, err := snapshot.ParseUserMeta([]byte(`{"step":1200,"epoch":3,"loss":0.41,"lr":3e-4}`))
	if err != nil {
		t.Fatal(err)
	}
	toWTXT := func(m snapshot.UserMeta) []byte {
		s, err := safetensors.New().Decode(ctx, bytes.NewReader(st.Bytes()), int64(st.Len()), formats.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Meta = snapshot.DefaultMeta()
		s.Meta.TS = s.Meta.TS.AddDate(2026, 0, 0)
		s.UserMeta = m
		var b bytes.Buffer
		if _, err := wtxt.Encode(ctx, &b, s, wtxt.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	with, with2, without := toWTXT(meta), toWTXT(meta), toWTXT(nil)
	if !bytes.Equal(with, with2) {
		t.Fatal("the same snapshot and metadata gave different WTXT bytes")
	}
	if !bytes.Contains(with, []byte("arr name="+snapshot.AttrsArrayName)) {
		t.Fatal("no attributes array")
	}
	back := func(w []byte) (*snapshot.Snapshot, []byte) {
		s, err := wtxt.New().Decode(ctx, bytes.NewReader(w), int64(len(w)), formats.DecodeOptions{Name: "g.wtxt"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := safetensors.New().Encode(ctx, &out, s, formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		return s, out.Bytes()
	}
	s1, b1 := back(with)
	s0, b0 := back(without)
	if !s1.UserMeta.Equal(meta) || s0.UserMeta != nil {
		t.Fatalf("metadata read back: %s / %s", s1.UserMeta.JSON(), s0.UserMeta.JSON())
	}
	if !bytes.Equal(b1, b0) {
		t.Fatal("the checkpoint restored from a WTXT with metadata differs from the one without")
	}
}
