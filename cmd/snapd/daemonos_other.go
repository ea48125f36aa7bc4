//go:build !linux

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// errDaemonLinuxOnly is what `snapd run` fails with off Linux (exit 2).
var errDaemonLinuxOnly = errors.New("snapd run: the daemon runs on Linux only; the read commands (verify, verify-repo, inspect, diff, convert, checkout, clone, assemble, decrypt, keygen) work here")

// restrictToPlatform makes `snapd run` fail with errDaemonLinuxOnly: the
// daemon needs Linux (OFD locks on the state directory, /proc for the git
// process-group reaper, Pdeathsig, sync_file_range, systemd notify).
func restrictToPlatform(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() == "run" {
			c.RunE = func(*cobra.Command, []string) error { return usageError{errDaemonLinuxOnly} }
		}
	}
}
