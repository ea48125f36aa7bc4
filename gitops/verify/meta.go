package verify

import (
	"errors"
	"os"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/snapshot"
)

// checkMeta checks a plaintext generation's Snapd-Meta trailer against
// the metadata inside its WTXT (the attributes document's "meta" member,
// covered by the WTXT's hashes and signature, which checkPlain verified):
// both absent, or equal. A difference names the keys, never the values.
func (v *verifier) checkMeta(x *gv, name string, wf *materialized, tr map[string]string) {
	trailer, terr := gitops.MetaOfTrailers(tr)
	if terr != nil {
		x.fail("", 0, CheckTrailer, "%v", terr)
	}
	f, err := os.Open(wf.path)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return
	}
	defer f.Close()
	inside, err := wtxt.ReadUserMeta(v.ctx, name, f, wf.size)
	if err != nil {
		var we *wtxt.Error
		if errors.As(err, &we) {
			return // checkPlain reported the file's failures
		}
		x.fail(name, 0, CheckTrailer, "metadata: %v", err)
		return
	}
	if terr != nil || trailer.Equal(inside) {
		return
	}
	var keys []string
	for _, c := range snapshot.DiffUserMeta(inside, trailer) {
		keys = append(keys, c.Key)
	}
	x.fail("", 0, CheckTrailer, "trailer %s disagrees with the metadata inside the WTXT (keys %s)", gitops.TrailerMeta, strings.Join(keys, ", "))
}
