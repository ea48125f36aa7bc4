//go:build race

package pipeline

// raceEnabled scales down the heaviest fault tests under the race
// detector (about 10x slower).
const raceEnabled = true
