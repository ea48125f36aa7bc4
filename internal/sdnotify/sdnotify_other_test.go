//go:build !linux

package sdnotify

import "testing"

func TestNotifyIsANoOp(t *testing.T) {
	if sent, err := Notify("/run/systemd/notify", Ready); sent || err != nil {
		t.Fatalf("sent %v err %v, want a no-op", sent, err)
	}
	if got := ReloadingState(); got != Reloading {
		t.Fatalf("ReloadingState() = %q", got)
	}
}
