package verify

import (
	"encoding/hex"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// rootContent is the content a generation's wtxt.Root declares (from its
// WTXT header or its seal), read from source.
func rootContent(r wtxt.Root, source string) content {
	return content{genText: r.Gen, ts: r.TS, build: r.Build, known: true, source: source,
		sha256All: hex.EncodeToString(r.SHA256All[:]), merklePrev: hex.EncodeToString(r.MerklePrev[:]), merkleThis: hex.EncodeToString(r.MerkleThis[:])}
}
