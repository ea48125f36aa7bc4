package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/testutil"
)

func testGeneration() Generation {
	return Generation{
		Gen: "000042", TS: "2026-11-24T05:00:00Z",
		MerkleThis: "cac98a3ca7eea687d7e37714c16483aa", SHA256All: "4cfe58c0d6b009989db584669d32a883", KeyID: "7dd3e4f0bb8cf9eb",
		SegmentSize: 4 << 20,
		Segments: []wtxt.Segment{
			{Digest: [32]byte{1}, Size: 4 << 20, Array: "W", FirstChunk: 0, Chunks: 64},
			{Digest: [32]byte{2}, Size: 100, Array: "W", FirstChunk: 64, Chunks: 1},
			{Digest: [32]byte{1}, Size: 4 << 20, Array: "X", FirstChunk: 0, Chunks: 64},
			{Digest: [32]byte{3}, Size: 0, Array: "empty", FirstChunk: 0, Chunks: 1},
		},
	}
}

// TestLayoutGolden: config and manifest bytes are a function of the
// generation alone (golden files), layers are the distinct non-empty
// segments, and the config parses back.
func TestLayoutGolden(t *testing.T) {
	g := testGeneration()
	cfg, err := BuildConfig(g)
	if err != nil {
		t.Fatal(err)
	}
	man, err := BuildManifest(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"config-v1.json": cfg, "manifest-v1.json": man} {
		p := filepath.Join("testdata", name)
		if os.Getenv("SNAPD_UPDATE_GOLDEN") != "" {
			os.WriteFile(p, got, 0o644)
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("%s differs from the golden file", name)
		}
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(man, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 2 || m.ArtifactType != ArtifactType || m.Annotations[ocispec.AnnotationCreated] != g.TS || m.Config.Digest != Descriptor(ConfigMediaType, cfg).Digest {
		t.Fatalf("manifest %s", man)
	}
	c, err := ParseConfig(cfg)
	if err != nil || len(c.Segments) != 4 || c.Segments[2].Array != "X" {
		t.Fatalf("parse: %+v %v", c, err)
	}
	if Tag(g.Gen) != "gen-000042" {
		t.Fatal(Tag(g.Gen))
	}
}

// FuzzParseConfig: any config blob parses or fails with an error; what
// parses re-encodes to a config that parses to the same value.
func FuzzParseConfig(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/config-*.json") {
		f.Add(b)
	}
	fixed := testutil.SourceTexts(f, ".")
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseConfig(in)
		if err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), in, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("re-encoded config does not parse: %v", err)
		}
		b2, _ := json.Marshal(c2)
		if string(b) != string(b2) {
			t.Fatal("config does not round-trip")
		}
	})
}
