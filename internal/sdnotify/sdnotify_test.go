//go:build linux

package sdnotify

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotifyPathAndAbstract(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify.sock"), "@snapd-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "_")} {
		c := listen(t, name)
		sent, err := Notify(name, Ready+"\nSTATUS=running")
		if err != nil || !sent {
			t.Fatalf("%s: sent %v err %v", name, sent, err)
		}
		if got := recv(t, c); got != "READY=1\nSTATUS=running" {
			t.Fatalf("%s: got %q", name, got)
		}
		sent, err = Notify(name, ReloadingState())
		if err != nil || !sent {
			t.Fatal(err)
		}
		if got := recv(t, c); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
			t.Fatalf("got %q", got)
		}
	}
}

func TestNotifyNoSocket(t *testing.T) {
	if sent, err := Notify("", Ready); sent || err != nil {
		t.Fatalf("%v %v", sent, err)
	}
	if _, err := Notify("vsock:2:1234", Ready); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("got %v", err)
	}
	if _, err := Notify(filepath.Join(t.TempDir(), "missing.sock"), Ready); err == nil {
		t.Fatal("no error for a missing socket")
	}
}
