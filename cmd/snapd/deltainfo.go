package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// deltaInfo is what `snapd inspect` shows of a DELTA v2 file
// (docs/FORMAT.md §4; its --json shape is docs/JSON.md's): the base it
// applies to, the target's header values and, per target array, the chunks
// the delta carries. formats/wtxt reads it (wtxt.ReadDeltaStructure) by
// structure only: the carried base64 is counted, not decoded; `snapd delta
// apply` checks every byte against the base.
type deltaInfo struct {
	File          string `json:"file"`
	Format        string `json:"format"` // "wtxt-delta"
	BaseSHA256All string `json:"base_sha256_all"`
	// Form is "full" (the target's header and every array) or "short"
	// (the seed form: replacement chunks for base arrays, no header).
	Form       string          `json:"form"`
	Meta       map[string]any  `json:"meta,omitempty"` // the target's meta and root values
	Arrays     []deltaArray    `json:"arrays"`
	Chunks     int64           `json:"chunks_carried"`
	ChunkBytes int64           `json:"chunk_bytes_carried"` // raw bytes of the carried chunks
	Audit      bool            `json:"audit"`               // the target has an (unsigned) audit line
	Bytes      int64           `json:"bytes"`               // the delta file's size
	Deferred   []string        `json:"deferred"`            // checks left to delta apply
	pending    map[string]bool // array names seen (duplicates refused)
}

// deltaArray is one array of a delta.
type deltaArray struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype,omitempty"` // absent in the short form
	Shape []int64 `json:"shape,omitempty"`
	Bytes int64   `json:"bytes,omitempty"`
	// Carried lists the chunk indexes the delta holds (empty: the array
	// is unchanged, taken from the base).
	Carried      []int64 `json:"carried"`
	CarriedBytes int64   `json:"carried_bytes"`
}

// isDelta reports whether head starts like a DELTA v2 file.
func isDelta(head []byte) bool { return wtxt.IsDelta(head) }

// newDeltaInfo is what inspect shows of the structure wtxt read.
func newDeltaInfo(name string, s *wtxt.DeltaStructure) *deltaInfo {
	info := &deltaInfo{File: name, Format: "wtxt-delta", BaseSHA256All: hex.EncodeToString(s.BaseSHA256All[:]), Form: "full",
		Arrays: make([]deltaArray, 0, len(s.Arrays)), Chunks: s.Chunks, ChunkBytes: s.ChunkBytes, Audit: s.Audit != "", Bytes: s.Size,
		Deferred: []string{"base", "parity", "base64", "chunk-sha256", "crc32c", "array-sha256", "signature"}}
	if s.Short {
		info.Form = "short"
	}
	if h := s.Header; h != nil {
		info.Meta = map[string]any{"schema": h.Meta.Schema, "gen": h.Meta.Gen, "gen_text": h.Gen, "ts": h.TS, "build": h.Build,
			"sha256_all": hex.EncodeToString(h.SHA256All[:])}
		if h.Pending {
			info.Meta["streamed"] = true
		} else {
			info.Meta["merkle_prev"] = hex.EncodeToString(h.MerklePrev[:])
			info.Meta["merkle_this"] = hex.EncodeToString(h.MerkleThis[:])
		}
		if h.Signature != nil {
			info.Meta["keyid"], info.Meta["signed"] = h.KeyID, true
		}
	}
	for _, a := range s.Arrays {
		da := deltaArray{Name: a.Name, Shape: a.Shape, Bytes: a.Bytes, Carried: a.Carried, CarriedBytes: a.CarriedBytes}
		if !s.Short {
			da.DType = a.DType.String()
		}
		info.Arrays = append(info.Arrays, da)
	}
	return info
}

// readDeltaInfo reads a DELTA v2 file's structure (wtxt.ReadDeltaStructure)
// for inspect.
func readDeltaInfo(ctx context.Context, name string, r io.Reader) (*deltaInfo, error) {
	s, err := wtxt.ReadDeltaStructure(ctx, name, r)
	if err != nil {
		return nil, err
	}
	return newDeltaInfo(name, s), nil
}

// inspectDelta prints what a DELTA v2 file holds.
func inspectDelta(ctx context.Context, e *env, o *inspectOptions) error {
	f, err := os.Open(o.file)
	if err != nil {
		return ioError{err}
	}
	defer f.Close()
	info, err := readDeltaInfo(ctx, o.file, f)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(e.stdout, info)
	}
	w := e.stdout
	fmt.Fprintf(w, "%s: DELTA v2 (%s form), %d arrays, %d chunks carried (%d raw bytes), %d bytes\n",
		info.File, info.Form, len(info.Arrays), info.Chunks, info.ChunkBytes, info.Bytes)
	fmt.Fprintf(w, "  base:        sha256_all %s\n", info.BaseSHA256All)
	if info.Form == "short" {
		fmt.Fprintf(w, "  target:      the base with these chunks replaced (no header: sha256_all and merkle_this are recomputed, no signature)\n")
	}
	for _, k := range []string{"gen_text", "ts", "build", "schema", "sha256_all", "merkle_prev", "merkle_this", "keyid"} {
		if v, ok := info.Meta[k]; ok {
			label := k
			if k == "gen_text" {
				label = "gen"
			}
			fmt.Fprintf(w, "  %-12s %v\n", label+":", v)
		}
	}
	if info.Meta["streamed"] == true {
		fmt.Fprintf(w, "  streamed:    root_pending (the target's root values are in its WSUM)\n")
	}
	if info.Audit {
		fmt.Fprintf(w, "  audit:       the target has an (unsigned) audit line\n")
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tDTYPE\tSHAPE\tBYTES\tCARRIED CHUNKS\tCARRIED BYTES")
	for _, a := range info.Arrays {
		dt, shape, size := a.DType, snapshot.FormatShape(a.Shape), fmt.Sprint(a.Bytes)
		if info.Form == "short" {
			dt, shape, size = "(base)", "(base)", "(base)"
		}
		carried := "none (unchanged)"
		if len(a.Carried) > 0 {
			carried = fmt.Sprintf("%d: %s", len(a.Carried), snapshot.FormatInts(a.Carried, 12))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\n", a.Name, dt, shape, size, carried, a.CarriedBytes)
	}
	tw.Flush()
	fmt.Fprintf(w, "  not checked here (snapd delta apply BASE DELTA OUT does): %s\n", strings.Join(info.Deferred, ", "))
	return nil
}
