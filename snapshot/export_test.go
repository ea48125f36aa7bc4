package snapshot

// GuardedWithoutDescriptor is m's Guarded view reading the mapping itself
// (under SetPanicOnFault) instead of the descriptor, as when none could be
// kept; m loses its descriptor. For tests and benchmarks.
func GuardedWithoutDescriptor(m *Mapping) *Guarded {
	if m.rf != nil {
		m.rf.Close()
		m.rf = nil
	}
	return m.Guarded()
}
