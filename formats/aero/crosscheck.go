package aero

import "sort"

// Cross-checks: AERO states several facts twice (the TOC and the MMSG
// manifest both list the chunks; MMSG gives each shard's size and tensor
// count, which the TOC and TIDX also determine; the TOC and the file size
// both say where the data ends). A file whose copies disagree is refused,
// so that a flipped count cannot make chunks or tensors silently vanish.

// checkManifest compares the MMSG manifest with the TOC and TIDX: every
// chunks[i] must name an existing TOC entry of the same fourcc, and every
// shards[i] a WTSH entry of that shard's name, with size_bytes equal to
// its length and tensor_count equal to the TIDX entries on that shard.
// Keys a manifest does not carry are not checked.
func (d *decoder) checkManifest() {
	e := d.mmsg
	if e == nil || e.bad || d.mmsgVal.kind != kMap {
		return
	}
	n := uint64(len(d.entries))
	entry := func(what string, i int, v mval) *tocEntry {
		ti, ok := v.get("toc_index")
		if !ok {
			return nil
		}
		if ti.kind != kUint || ti.u >= n {
			d.problem(ErrCorrupt, "mmsg", e, "", int64(e.off), "manifest %s[%d].toc_index is not the index of one of the %d TOC entries", what, i, n)
			return nil
		}
		return d.entries[ti.u]
	}
	if chunks, ok := d.mmsgVal.get("chunks"); ok && chunks.kind == kArray {
		for i, c := range chunks.arr {
			t := entry("chunks", i, c)
			if t == nil {
				continue
			}
			if fc, ok := c.get("fourcc"); ok && (fc.kind != kStr || fc.s != string(t.fourcc[:])) {
				d.problem(ErrCorrupt, "mmsg", e, "", int64(e.off), "manifest chunks[%d].fourcc disagrees with %s", i, t.label())
			}
		}
	}
	shards, ok := d.mmsgVal.get("shards")
	if !ok || shards.kind != kArray {
		return
	}
	count := map[uint64]uint64{}
	for _, t := range d.tensors {
		count[t.shardID]++
	}
	for i, sv := range shards.arr {
		t := entry("shards", i, sv)
		if t == nil {
			continue
		}
		id, hasID := sv.get("shard_id")
		if hasID && (id.kind != kUint || !t.is("WTSH") || t.name != shardName(id.u)) {
			d.problem(ErrCorrupt, "mmsg", e, "", int64(e.off), "manifest shards[%d]: shard_id and toc_index do not name the same WTSH chunk (%s)", i, t.label())
			continue
		}
		if sz, ok := sv.get("size_bytes"); ok && (sz.kind != kUint || sz.u != t.length) {
			d.problem(ErrCorrupt, "mmsg", e, "", int64(e.off), "manifest shards[%d].size_bytes disagrees with the %d-byte %s", i, t.length, t.label())
		}
		if tc, ok := sv.get("tensor_count"); ok && hasID && d.tidx != nil && !d.tidx.bad {
			if tc.kind != kUint || tc.u != count[id.u] {
				d.problem(ErrCorrupt, "mmsg", e, "", int64(e.off), "manifest shards[%d].tensor_count disagrees with the %d TIDX entries on shard %d", i, count[id.u], id.u)
			}
		}
	}
}

// checkCoverage requires every byte of the file to belong to the header,
// the TOC, the string table or a chunk, except zero padding between them,
// and the file to end where the last of them ends. A TOC that lists fewer
// chunks than the file holds (an entry_count flipped to 0, a truncated
// TOC) leaves data uncovered and is refused.
func (d *decoder) checkCoverage() error {
	type span struct{ lo, hi uint64 }
	spans := []span{{0, headerSize}, {d.hdr.tocOff, d.hdr.tocOff + d.hdr.tocLen}}
	if d.hdr.stLen > 0 {
		spans = append(spans, span{d.hdr.stOff, d.hdr.stOff + d.hdr.stLen})
	}
	for _, e := range d.entries {
		if e.length > 0 && inFile(e.off, e.length, d.size) {
			spans = append(spans, span{e.off, e.off + e.length})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	var pos uint64
	for _, s := range spans {
		if s.lo > pos {
			if err := d.zeroGap(pos, s.lo); err != nil {
				return err
			}
		}
		pos = max(pos, s.hi)
	}
	if size := uint64(d.size); pos < size {
		d.problem(ErrCorrupt, "coverage", nil, "", int64(pos), "bytes [%d, %d) at the end of the file belong to no TOC entry (the TOC lists %d chunks; the file should end where the last one ends)", pos, size, len(d.entries))
	}
	return nil
}

// zeroGap reports a problem when [lo, hi), which no structure covers,
// holds anything but zeros.
func (d *decoder) zeroGap(lo, hi uint64) error {
	nonZero := int64(-1)
	at := int64(lo)
	err := d.stream(d.ctx, int64(lo), int64(hi-lo), func(b []byte) {
		if nonZero < 0 {
			for i := range b {
				if b[i] != 0 {
					nonZero = at + int64(i)
					break
				}
			}
		}
		at += int64(len(b))
	})
	if err != nil {
		return err
	}
	if nonZero >= 0 {
		d.problem(ErrCorrupt, "coverage", nil, "", nonZero, "bytes [%d, %d) belong to no TOC entry and are not zero padding (first non-zero byte at %d)", lo, hi, nonZero)
	}
	return nil
}
