package verify

import (
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
)

// rootContent is the content a generation's wtxt.Root declares (from its
// WTXT header or its seal), read from source.
func rootContent(r wtxt.Root, source string) content {
	ct := content{known: true, source: source}
	for i, f := range r.Fields() {
		*ct.vals()[i] = f.Value
	}
	return ct
}

// trailerContent is the content a commit's trailers claim (not verified).
func trailerContent(tr map[string]string) content {
	var ct content
	for i, k := range gitops.RootTrailers() {
		*ct.vals()[i] = tr[k]
	}
	return ct
}

// vals lists c's root values in wtxt.Root.Fields order, the order of
// gitops.RootTrailers and of generation.txt's first lines.
func (c *content) vals() [6]*string {
	return [6]*string{&c.genText, &c.ts, &c.build, &c.sha256All, &c.merklePrev, &c.merkleThis}
}
