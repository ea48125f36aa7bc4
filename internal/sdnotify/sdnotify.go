// Package sdnotify tells systemd about a service's state, the protocol of
// sd_notify(3): one datagram of newline-separated VAR=VALUE assignments
// sent to the AF_UNIX socket named by $NOTIFY_SOCKET. A unit with
// Type=notify is "started" only once READY=1 arrives.
//
// Hand-written (about 40 lines) rather than a dependency: the protocol is
// one sendmsg, and the daemon needs no other part of go-systemd.
//
// systemd exists on Linux only: elsewhere Notify does nothing and
// reports false.
package sdnotify

import "errors"

// The states snapd sends (see sd_notify(3)).
const (
	Ready     = "READY=1"
	Stopping  = "STOPPING=1"
	Reloading = "RELOADING=1"
)

// SocketEnv is the environment variable systemd sets for Type=notify
// services.
const SocketEnv = "NOTIFY_SOCKET"

// ErrUnsupported: $NOTIFY_SOCKET names a socket type snapd cannot use
// (only filesystem paths and abstract "@name" sockets are supported).
var ErrUnsupported = errors.New("sdnotify: unsupported NOTIFY_SOCKET address")
