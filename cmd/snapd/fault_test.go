package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// `snapd convert` of a source truncated after it was
// mapped and decoded (what runConvert does between openSnapshot and the
// encode) died with SIGBUS; now the encode fails with ErrSourceFault.
func TestConvertSourceTruncatedWhileMapped(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	data := bytes.Repeat([]byte{1, 2, 3, 4}, 64<<10) // 256 KiB of f32
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "w", DType: snapshot.F32, Shape: []int64{256, 256}, Data: snapshot.Bytes(data)}}}
	var buf bytes.Buffer
	if err := safetensors.New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"wtxt", "safetensors"} {
		if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		src, err := openSnapshot(context.Background(), newRegistry(), in, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(in, 4096); err != nil {
			t.Fatal(err)
		}
		if target == "wtxt" {
			src.Meta = snapshot.DefaultMeta()
			src.Meta.TS = time.Unix(1700000000, 0).UTC()
			_, err = wtxt.Encode(context.Background(), io.Discard, src.Snapshot, wtxt.EncodeOptions{})
		} else {
			err = safetensors.New().Encode(context.Background(), io.Discard, src.Snapshot, formats.EncodeOptions{})
		}
		src.Close()
		if !errors.Is(err, snapshot.ErrSourceFault) {
			t.Fatalf("%s: %v", target, err)
		}
	}
}
