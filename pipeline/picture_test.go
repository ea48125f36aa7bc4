package pipeline

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
)

// gitShow returns rev:path of the daemon's repository, or nil when it is
// not there.
func gitShow(t *testing.T, repo, rev, path string) []byte {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", repo, "show", rev+":"+path).Output()
	if err != nil {
		return nil
	}
	return out
}

// TestPictureCommitted: every generation with a base gets its diff
// picture in the ring and in its commit (snapshots/current.diff.svg), the
// first one none; with NoPicture none is drawn.
func TestPictureCommitted(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	for _, off := range []bool{false, true} {
		f := newFixture(t)
		f.start(t, func(c *Config, _ *Deps) { c.NoPicture = off })
		for g := uint64(1); g <= 3; g++ {
			request(t, f.dir, g, publish(t, f.dir, g))
			if r := f.wait(t, g); r.Commit == "" {
				t.Fatalf("gen %d not committed: %+v", g, r)
			}
		}
		f.stop(t)
		repo := filepath.Join(f.dir, RepoDir)
		file := "snapshots/" + gitops.FilePicture
		if gitShow(t, repo, "gen-000001", file) != nil {
			t.Fatal("the first generation has a picture (it has no base)")
		}
		for _, g := range []string{"000002", "000003"} {
			svg := gitShow(t, repo, "gen-"+g, file)
			ring := filepath.Join(f.dir, RingDir, "gen-"+g+ExtPicture)
			if off {
				if svg != nil || fileExists(ring) {
					t.Fatalf("gen %s: a picture with NoPicture", g)
				}
				continue
			}
			onDisk, err := os.ReadFile(ring)
			if err != nil || !bytes.Equal(svg, onDisk) {
				t.Fatalf("gen %s: committed picture (%d bytes) is not the ring's: %v", g, len(svg), err)
			}
			// model(): rows step%rows and 13·step%rows move each step, so
			// 4 rows of each array differ from the previous generation.
			text := svgText(t, svg)
			for _, want := range []string{"→ " + g, "embed.weight", "changed 4 of 256 rows", "head.weight", "changed 4 of 64 rows", "2 of 2 arrays changed"} {
				if !strings.Contains(text, want) {
					t.Errorf("gen %s: no %q in the picture:\n%s", g, want, text)
				}
			}
		}
	}
}

func svgText(t *testing.T, doc []byte) string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatalf("picture is not well-formed: %v", err)
		}
		if c, ok := tok.(xml.CharData); ok {
			b.Write(c)
			b.WriteByte('\n')
		}
	}
}
