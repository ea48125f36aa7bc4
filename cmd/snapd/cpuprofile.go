package main

import (
	"fmt"
	"runtime/pprof"

	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// startCPUProfile starts the Go CPU profiler (runtime/pprof) for a
// debugging session and returns the function that stops it and writes
// the profile to path (atomically: a daemon killed with SIGKILL leaves no
// profile and no partial file). path "" profiles nothing. Only this
// process is sampled; git children are not.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Abort()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Commit(); err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		return nil
	}, nil
}
