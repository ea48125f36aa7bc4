package oci

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestFetchManifestNeverEchoes: a manifest comes from the registry
// (hostile). One that is not JSON, or holds the marker where the
// manifest wants another type, is refused naming the repository, the tag
// and the check with a byte offset, never quoting the manifest. The
// registry is a hostile HTTP server: a real one refuses to store such a
// manifest.
func TestFetchManifestNeverEchoes(t *testing.T) {
	const mt = "application/vnd.oci.image.manifest.v1+json"
	for _, e := range []string{testutil.EvilMarker, strings.ReplaceAll(testutil.EvilMarkerEsc, "\x1b", `\u001b`)} {
		for _, c := range []struct{ name, body, want string }{
			{"syntax", `{"schemaVersion":2,"layers":` + e + `}`, "not an OCI manifest: malformed JSON at byte 28"},
			{"type", `{"schemaVersion":2,"layers":[{"size":"` + e + `"}]}`, "not an OCI manifest: wrong JSON type for "},
			{"truncated", `{"schemaVersion":2,"annotations":{"` + e, "not an OCI manifest: truncated JSON"},
		} {
			body := []byte(c.body)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasPrefix(r.URL.Path, "/v2/snap/manifests/") {
					w.WriteHeader(http.StatusOK) // the /v2/ ping
					return
				}
				w.Header().Set("Content-Type", mt)
				w.Header().Set("Docker-Content-Digest", fmt.Sprintf("sha256:%x", sha256.Sum256(body)))
				w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				if r.Method == http.MethodGet {
					w.Write(body)
				}
			}))
			host := strings.TrimPrefix(srv.URL, "http://")
			r, err := Open(host+"/snap", Options{DockerConfig: filepath.Join(t.TempDir(), "none.json"), HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			_, _, _, err = r.FetchManifest(context.Background(), "gen-000001")
			srv.Close()
			if err == nil {
				t.Errorf("%s: fetched", c.name)
				continue
			}
			msg := err.Error()
			if p, ok := testutil.EchoesEvil(msg); ok {
				t.Errorf("%s: error quotes the manifest (%q): %s", c.name, p, msg)
			}
			if !strings.HasPrefix(msg, "oci "+host+"/snap: manifest gen-000001: ") || !strings.Contains(msg, c.want) {
				t.Errorf("%s: %s\nwant the repository, the tag and %q", c.name, msg, c.want)
			}
		}
	}
}
