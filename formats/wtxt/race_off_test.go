//go:build !race

package wtxt

// raceEnabled reports whether the race detector is on (tests scale down
// their exhaustive loops).
const raceEnabled = false
