package wal

import (
	"path/filepath"
	"sort"
)

// Entry is one request as `snapd wal list` shows it.
type Entry struct {
	// Record is the request. When HasRecord is false its segment was
	// already consumed and removed, and only Gen, Source and Time (of the
	// outcome) are known.
	Record
	HasRecord bool
	State     State
	Message   string // failure message when State is Failed
}

// List returns every request in the WAL directory dir with its state,
// in log order, followed by generations whose outcome is recorded but
// whose requests were already removed (ascending by generation). It only
// reads: it takes no lock and modifies nothing, so it is safe while a
// consumer runs. Corrupt lines are passed to onCorrupt (may be nil).
//
// A request is failed if it failed itself (its own outcome line, e.g. a
// request that re-used a done generation's number for other content) or
// its generation failed at a later request; done if its generation is done
// and it is that request or was consumed before (a duplicate skipped by an
// older consumer); pending otherwise (including a newer request for a
// generation whose earlier request failed, which the consumer will retry,
// and one for a done generation the consumer has not judged yet).
func List(dir string, onCorrupt func(*CorruptError)) ([]Entry, error) {
	ol, err := readOutcomes(filepath.Join(dir, OutcomesFile))
	if err != nil {
		return nil, err
	}
	outcomes := ol.latest
	// Unreadable: every request without its own outcome counts as
	// consumed, as before cursors were consulted here.
	cursor, cerr := ReadCursor(dir)
	consumed := func(r Record) bool { return cerr != nil || !cursor.Less(r.End) }
	r := NewReader(dir, Pos{}, ReaderOptions{OnCorrupt: onCorrupt})
	r.scan = true
	defer r.Close()
	var out []Entry
	seen := map[uint64]bool{}
	seenPos := map[Pos]bool{}
	for r.Next() {
		rec := r.Record()
		seenPos[rec.Pos] = true
		e := Entry{Record: rec, HasRecord: true}
		if f, ok := ol.failed[rec.Pos]; ok {
			e.State, e.Message = Failed, f.Message
		} else if o, ok := outcomes[rec.Gen]; ok {
			switch {
			case o.State == Done && (o.Pos == rec.Pos || consumed(rec)):
				e.State = Done
			case o.State == Failed && !o.Pos.Less(rec.Pos):
				e.State, e.Message = Failed, o.Message
			}
		}
		seen[rec.Gen] = true
		out = append(out, e)
	}
	if err := r.Err(); err != nil {
		return out, err
	}
	var gone []Entry
	for g, o := range outcomes {
		if seen[g] {
			continue
		}
		gone = append(gone, Entry{
			Record:  Record{Request: Request{Gen: g, Time: o.Time, Source: o.Source}, Pos: o.Pos},
			State:   o.State,
			Message: o.Message,
		})
	}
	// Removed requests that failed while their generation is done (they
	// are not the generation's outcome): listed too, never hidden.
	for p, f := range ol.failed {
		if o := outcomes[f.Gen]; !seenPos[p] && o.State == Done {
			gone = append(gone, Entry{Record: Record{Request: Request{Gen: f.Gen, Time: f.Time, Source: f.Source}, Pos: p}, State: Failed, Message: f.Message})
		}
	}
	sort.Slice(gone, func(i, j int) bool {
		if gone[i].Gen != gone[j].Gen {
			return gone[i].Gen < gone[j].Gen
		}
		return gone[i].Pos.Less(gone[j].Pos)
	})
	return append(out, gone...), nil
}
