package oci

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestRegistryPushStreamed: a streamed WTXT (root_pending) is never
// published with its header's all-zero root values: without its WSUM the
// push fails with ErrStreamed and no tag appears; with it the manifest's
// snapd.sha256_all and snapd.merkle_this are the WSUM's and the skeleton
// assembles back into the streamed WTXT.
func TestRegistryPushStreamed(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/streamed", Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := snapshot.DefaultMeta()
	m.Gen, m.TS, m.Build = 3, time.Date(2026, 11, 24, 5, 0, 3, 0, time.UTC), "test"
	s := &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: "W", DType: snapshot.F32, Shape: []int64{1024, 64}, Data: snapshot.Bytes(bytes.Repeat([]byte{1, 2, 3, 4}, 1024*64))},
	}}
	var buf bytes.Buffer
	res, err := wtxt.Encode(context.Background(), &buf, s, wtxt.EncodeOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	in := buf.Bytes()
	ctx := context.Background()
	var skel bytes.Buffer
	_, err = repo.PushWTXTAt(ctx, bytes.NewReader(in), int64(len(in)), "s.wtxt", &skel, 64<<10, Previous{})
	if !errors.Is(err, ErrStreamed) {
		t.Fatalf("push of a streamed WTXT without its WSUM: %v, want ErrStreamed", err)
	}
	if tags, err := repo.Tags(ctx); err != nil || len(tags) != 0 {
		t.Fatalf("tags after the refused push: %v %v", tags, err)
	}
	w, err := wtxt.ParseWSUM(res.WSUM)
	if err != nil {
		t.Fatal(err)
	}
	skel.Reset()
	pr, err := repo.PushStreamedWTXTAt(ctx, bytes.NewReader(in), int64(len(in)), "s.wtxt", &skel, 64<<10, Previous{}, w)
	if err != nil {
		t.Fatal(err)
	}
	_, man, _, err := repo.FetchManifest(ctx, pr.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if man.Annotations[AnnSHA256All] != hex.EncodeToString(w.SHA256All[:]) || man.Annotations[AnnMerkleThis] != hex.EncodeToString(w.MerkleThis[:]) ||
		w.SHA256All == ([32]byte{}) {
		t.Fatalf("annotations %v, want the WSUM's", man.Annotations)
	}
	if got, err := assembleFrom(t, repo, skel.Bytes()); err != nil || !bytes.Equal(got, in) {
		t.Fatalf("assemble: %v", err)
	}
}
