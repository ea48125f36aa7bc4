package layouttest

import (
	"testing"

	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestConformance runs every layout over every blob store.
func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		Run(t, Store{Name: "memory", New: func(testing.TB) layout.Blobs { return layout.NewMemory() }})
	})
	t.Run("git", func(t *testing.T) {
		Run(t, Store{Name: "git", New: func(testing.TB) layout.Blobs { return layout.NewGitBlobs(memory.NewStorage(), nil) }})
	})
	t.Run("oci", func(t *testing.T) {
		reg := registrytest.Start(t, "", "")
		n := 0
		Run(t, Store{Name: "oci", New: func(t testing.TB) layout.Blobs {
			n++
			r, err := oci.Open(reg.Host+"/layouttest/"+string(rune('a'+n%26))+"x", oci.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return r.Blobs()
		}})
	})
}
