package safetensors

import (
	"encoding/binary"
	"testing"
)

// hostileST is a small file whose header length field declares 1 TiB of
// header JSON (safetensors has no compression: its only large decode is
// the header, bounded by MaxHeaderSize).
func hostileST(tb testing.TB) []byte {
	b := binary.LittleEndian.AppendUint64(nil, 1<<40)
	return append(b, `{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`...)
}
