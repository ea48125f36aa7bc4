//go:build !linux

package gitops

import "io"

// growCatPipe does nothing: only Linux resizes pipes.
func growCatPipe(io.Reader) {}
