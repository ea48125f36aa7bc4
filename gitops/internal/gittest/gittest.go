// Package gittest forwards to internal/gittest, where the Git test helpers
// moved so that pipeline and cmd/snapd tests can use them too. It remains
// only for importers not yet switched (gitops/verify); import
// github.com/snapd-ml/snapd/internal/gittest instead, then delete this.
package gittest

import "github.com/snapd-ml/snapd/internal/gittest"

// Types and constants of internal/gittest.
type (
	Array      = gittest.Array
	Mode       = gittest.Mode
	HTTPRemote = gittest.HTTPRemote
	SSHRemote  = gittest.SSHRemote
)

// Modes of an HTTPRemote.
const (
	Up      = gittest.Up
	Down    = gittest.Down
	LoseAck = gittest.LoseAck
	HangAck = gittest.HangAck
)

// Functions of internal/gittest.
var (
	WTXT          = gittest.WTXT
	Pseudo        = gittest.Pseudo
	Git           = gittest.Git
	GitRun        = gittest.GitRun
	WriteFile     = gittest.WriteFile
	NewHTTPRemote = gittest.NewHTTPRemote
	NewKeyFile    = gittest.NewKeyFile
	NewSSHRemote  = gittest.NewSSHRemote
)
