//go:build race

package main

// raceEnabled scales down the longest daemon runs under the race
// detector (about 10x slower), as -short does.
const raceEnabled = true
