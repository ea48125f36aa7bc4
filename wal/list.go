package wal

import (
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
// A request is done if its generation is done; failed if its generation
// failed at this request or a later one; pending otherwise (including a
// newer request for a generation whose earlier request failed, which the
// consumer will retry).
func List(dir string, onCorrupt func(*CorruptError)) ([]Entry, error) {
	outcomes, err := LoadOutcomes(dir)
	if err != nil {
		return nil, err
	}
	r := NewReader(dir, Pos{}, ReaderOptions{OnCorrupt: onCorrupt})
	r.scan = true
	defer r.Close()
	var out []Entry
	seen := map[uint64]bool{}
	for r.Next() {
		rec := r.Record()
		e := Entry{Record: rec, HasRecord: true}
		if o, ok := outcomes[rec.Gen]; ok {
			switch {
			case o.State == Done:
				e.State = Done
			case !o.Pos.Less(rec.Pos):
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
	sort.Slice(gone, func(i, j int) bool { return gone[i].Gen < gone[j].Gen })
	return append(out, gone...), nil
}
