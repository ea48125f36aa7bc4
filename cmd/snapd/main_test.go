package main

import (
	"os"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
)

// TestMain turns on the pack check (gitops.EnvCheckPacks) for every test
// of the package: each pack a gitops Commit writes must pass git
// index-pack --strict before it is installed, or that Commit fails.
func TestMain(m *testing.M) {
	os.Setenv(gitops.EnvCheckPacks, "1")
	os.Exit(m.Run())
}
