//go:build unix

package gittest

import "syscall"

// mkfifo makes a FIFO at p, readable and writable by the owner only.
func mkfifo(p string) error { return syscall.Mkfifo(p, 0o600) }
