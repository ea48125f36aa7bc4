package gitops

import (
	"os"
	"testing"
)

// TestMain turns on the pack check (EnvCheckPacks) for every test of the
// package: each pack a Commit writes must pass git index-pack --strict
// before it is installed, or that Commit fails.
func TestMain(m *testing.M) {
	os.Setenv(EnvCheckPacks, "1")
	os.Exit(m.Run())
}
