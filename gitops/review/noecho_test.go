package review

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestPatchErrorsNeverEcho: a pull request's patch is hostile input. A
// malformed hunk header or a stray line inside a hunk is refused at its
// patch line without being quoted.
func TestPatchErrorsNeverEcho(t *testing.T) {
	for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
		for name, patch := range map[string]string{
			"header":         "@@ " + evil + " @@\n+a\n",
			"header old":     "@@ -1," + evil + " +1 @@\n+a\n",
			"header new":     "@@ -1 +" + evil + ",1 @@\n+a\n",
			"line in a hunk": "@@ -1,2 +1,2 @@\n a\n" + evil + "\n b\n",
			"second header":  "@@ -1 +1 @@\n a\n@@ -" + evil + " +2 @@\n b\n",
		} {
			_, err := ParsePatch(patch)
			if err == nil {
				t.Fatalf("%s: accepted", name)
			}
			if !strings.HasPrefix(err.Error(), "patch line ") {
				t.Errorf("%s: %v does not name the patch line", name, err)
			}
			if p, ok := testutil.EchoesEvil(err.Error()); ok {
				t.Errorf("%s: error quotes the patch (%q): %v", name, p, err)
			}
		}
	}
}
