package sdnotify

import (
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Notify sends state (one or more VAR=VALUE lines) to socket, the value of
// $NOTIFY_SOCKET. An empty socket means the process does not run under
// systemd's notify protocol: Notify then does nothing and returns false.
// It returns true when the datagram was sent. It never blocks for long:
// the write has a one-second deadline.
func Notify(socket, state string) (bool, error) {
	if socket == "" {
		return false, nil
	}
	if !strings.HasPrefix(socket, "/") && !strings.HasPrefix(socket, "@") {
		return false, fmt.Errorf("%w: %q", ErrUnsupported, socket)
	}
	// net treats a leading '@' as Linux's abstract namespace.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}

// ReloadingState is RELOADING=1 with the MONOTONIC_USEC stamp systemd
// (253 and later, Type=notify-reload) requires; older versions ignore the
// stamp.
func ReloadingState() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return Reloading
	}
	return fmt.Sprintf("%s\nMONOTONIC_USEC=%d", Reloading, ts.Nano()/1000)
}
