//go:build unix

package oci

import "syscall"

// nonBlock keeps an open of a FIFO from blocking.
const nonBlock = syscall.O_NONBLOCK
