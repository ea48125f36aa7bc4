package main

import (
	"fmt"
	"log/slog"

	"github.com/snapd-ml/snapd/internal/sdnotify"
)

// sdNotify tells systemd (Type=notify, $NOTIFY_SOCKET) about the daemon's
// state; outside systemd it does nothing. A failure is logged, never
// fatal: the daemon works the same without a service manager.
func sdNotify(e *env, log *slog.Logger, state string) {
	if _, err := sdnotify.Notify(e.getenv(sdnotify.SocketEnv), state); err != nil {
		log.Warn("sd_notify", "error", err)
	}
}

// readyState is READY=1 with a STATUS line systemctl status shows.
func readyState(stateDir string, gen uint64) string {
	return fmt.Sprintf("%s\nSTATUS=snapshotting requests from %s/wal (chain head gen %d)", sdnotify.Ready, stateDir, gen)
}
