package oci

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// guard bounds a test that would otherwise hang on the bug it checks; it
// never decides the outcome of a passing run.
const guard = 5 * time.Minute

func openStall(t *testing.T, host string, to Timeouts) *Repository {
	t.Helper()
	r, err := Open(host+"/snapd/stall", Options{DockerConfig: filepath.Join(t.TempDir(), "none.json"), Timeouts: to})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wantStall(t *testing.T, ctx context.Context, err error, phase string) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("the failure guard ended the request, not the registry timeout: %v", err)
	}
	var se *StallError
	if !errors.Is(err, ErrStalled) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want a StallError (errors.Is ErrStalled)", err)
	}
	if se.Phase != phase {
		t.Fatalf("stalled in %q, want %q: %v", se.Phase, phase, err)
	}
}

// TestRegistryNeverAnswers: a registry that accepts the connection and
// never answers fails every kind of request with ErrStalled (response
// headers) instead of waiting for ever.
func TestRegistryNeverAnswers(t *testing.T) {
	host := registrytest.StartSilent(t)
	repo := openStall(t, host, Timeouts{ResponseHeader: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	seg := wtxt.Segment{Array: "W", Size: 1 << 20, Digest: [32]byte{1}}
	_, err := repo.OpenBlob(ctx, seg)
	wantStall(t, ctx, err, "response headers")
	_, err = repo.Exists(ctx, SegmentDescriptor(seg))
	wantStall(t, ctx, err, "response headers")
	_, _, _, err = repo.FetchManifest(ctx, "gen-000001")
	wantStall(t, ctx, err, "response headers")
	_, err = repo.Tags(ctx)
	wantStall(t, ctx, err, "response headers")
	_, err = repo.PushWTXT(ctx, bytes.NewReader(genWTXT(t, 1, 0, 0)), "g1.wtxt", io.Discard, 256<<10)
	wantStall(t, ctx, err, "response headers")
}

// TestRegistryTrickles: a registry that answers at once but sends the
// body one byte at a time is stalled (too few bytes per stall window),
// though a byte arrives every interval.
func TestRegistryTrickles(t *testing.T) {
	tr := registrytest.StartTrickle(t, 1<<20, 20*time.Millisecond)
	repo := openStall(t, tr.Host, Timeouts{Stall: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	rc, err := repo.OpenBlob(ctx, wtxt.Segment{Array: "W", Size: 1 << 20, Digest: [32]byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	wantStall(t, ctx, err, "response body")
	if tr.Sent() == 0 {
		t.Fatal("the trickle sent nothing: the test did not exercise a slow body")
	}
}

// TestRegistryUploadNotRead: a registry that stops reading an upload
// stalls the request body (more than the socket buffers hold is sent).
func TestRegistryUploadNotRead(t *testing.T) {
	host := registrytest.StartNoRead(t)
	repo := openStall(t, host, Timeouts{Stall: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	data := make([]byte, 64<<20)
	desc := Descriptor(SegmentMediaType, data)
	err := repo.repo.Push(ctx, desc, bytes.NewReader(data))
	wantStall(t, ctx, err, "request body")
}
