package gitops

import "strconv"

// parseGenTrailer reads a generation trailer (the WTXT meta gen, decimal
// zero-padded to at least 6 digits). It is always base 10: fmt.Sscan
// would read "000010" as octal 8 and "000009" as 0.
func parseGenTrailer(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
