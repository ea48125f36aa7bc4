package fold

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// stenDTypes maps safetensors dtype names to snapshot dtypes.
var stenDTypes = map[string]snapshot.DType{
	"F64": snapshot.F64, "F32": snapshot.F32, "F16": snapshot.F16, "BF16": snapshot.BF16,
	"I64": snapshot.I64, "I32": snapshot.I32, "I16": snapshot.I16, "I8": snapshot.I8,
	"U64": snapshot.U64, "U32": snapshot.U32, "U16": snapshot.U16, "U8": snapshot.U8,
	"BOOL": snapshot.Bool,
}

// stenSizes gives element sizes of safetensors dtypes without a snapshot
// counterpart (their bytes are carried as u8).
var stenSizes = map[string]int{
	"F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "E4M3": 1, "E5M2": 1,
	"C64": 8, "C128": 16, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1,
}

func stenName(dt snapshot.DType) string {
	for k, v := range stenDTypes {
		if v == dt {
			return k
		}
	}
	return ""
}

type stenEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// parseSTEN reads safetensors bytes: u64 LE header length n, n bytes of
// JSON {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, data.
// Every tensor is spliced (its bytes are little-endian C order already);
// the header stays in the payload array byte for byte.
func parseSTEN(payload []byte) ([]tensorOut, error) {
	if len(payload) < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes, need at least 8", len(payload))
	}
	n := binary.LittleEndian.Uint64(payload)
	if n > MaxSTENHeader {
		return nil, fmt.Errorf("safetensors: header length %d exceeds limit %d", n, MaxSTENHeader)
	}
	if n > uint64(len(payload))-8 {
		return nil, fmt.Errorf("safetensors: header length %d exceeds payload size %d", n, len(payload))
	}
	dataStart := 8 + int64(n)
	dataLen := int64(len(payload)) - dataStart
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(payload[8:dataStart]))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("safetensors header: %w", jsonerr.DescribeAt(err, 8)) // offsets in the payload
	}
	if len(raw) > MaxSTENTensors {
		return nil, fmt.Errorf("safetensors: %d tensors exceed limit %d", len(raw), MaxSTENTensors)
	}
	var out []tensorOut
	for name, msg := range raw {
		if name == "__metadata__" {
			var m map[string]string
			if err := json.Unmarshal(msg, &m); err != nil {
				return nil, fmt.Errorf("safetensors __metadata__ (offsets in the value): %w", jsonerr.Describe(err))
			}
			continue
		}
		var e stenEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("safetensors tensor %q (offsets in its entry): %w", name, jsonerr.Describe(err))
		}
		if len(e.DataOffsets) != 2 || e.DataOffsets[0] > e.DataOffsets[1] || e.DataOffsets[1] > uint64(dataLen) {
			return nil, fmt.Errorf("safetensors tensor %q: data_offsets %v outside data of %d bytes", name, e.DataOffsets, dataLen)
		}
		nbytes := int64(e.DataOffsets[1] - e.DataOffsets[0])
		t := tensorOut{name: name, off: dataStart + int64(e.DataOffsets[0]), n: nbytes, spliced: nbytes > 0}
		t.data = payload[t.off : t.off+nbytes]
		if dt, ok := stenDTypes[e.DType]; ok {
			cnt, err := elemCount(e.Shape, nbytes/int64(dt.Size()))
			if err != nil {
				return nil, fmt.Errorf("safetensors tensor %q: shape %v: %w", name, e.Shape, err)
			}
			if cnt*int64(dt.Size()) != nbytes {
				return nil, fmt.Errorf("safetensors tensor %q: %s%v needs %d bytes, data_offsets give %d", name, e.DType, e.Shape, cnt*int64(dt.Size()), nbytes)
			}
			t.dtype, t.shape = dt, e.Shape
		} else {
			if _, known := stenSizes[e.DType]; !known && e.DType == "" {
				return nil, fmt.Errorf("safetensors tensor %q: missing dtype", name)
			}
			shape := jsonInts(e.Shape)
			t.dtype, t.shape = snapshot.U8, []int64{nbytes}
			t.attrs = map[string]string{AttrSTENDType: e.DType, AttrSTENShape: shape}
		}
		out = append(out, t)
	}
	// Deterministic order (map iteration is random): by offset, then name.
	sort.Slice(out, func(i, j int) bool {
		if out[i].off != out[j].off {
			return out[i].off < out[j].off
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// writeSTEN builds safetensors bytes for arrays (in the given order),
// header padded with spaces to a multiple of 8 as the reference library
// does. names gives the tensor name of each array.
func writeSTEN(arrays []*snapshot.Array, names []string, data [][]byte) ([]byte, error) {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	var off uint64
	seen := map[string]bool{}
	for i, a := range arrays {
		dt := stenName(a.DType)
		if dt == "" {
			return nil, fmt.Errorf("array %q: dtype %s has no safetensors name", a.Name, a.DType)
		}
		if seen[names[i]] || names[i] == "__metadata__" {
			return nil, fmt.Errorf("array %q: duplicate or reserved tensor name %q", a.Name, names[i])
		}
		seen[names[i]] = true
		if i > 0 {
			hdr.WriteByte(',')
		}
		k, _ := json.Marshal(names[i])
		shape := a.Shape
		if shape == nil {
			shape = []int64{}
		}
		sh, _ := json.Marshal(shape)
		end := off + uint64(len(data[i]))
		fmt.Fprintf(&hdr, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, k, dt, sh, off, end)
		off = end
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := make([]byte, 8, 8+hdr.Len()+int(off))
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	out = append(out, hdr.Bytes()...)
	for _, d := range data {
		out = append(out, d...)
	}
	if uint64(len(out)) != 8+uint64(hdr.Len())+off {
		return nil, errors.New("safetensors: size bookkeeping")
	}
	return out, nil
}
