//go:build unix

package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMapOpenFileRefusesFIFO: a FIFO (opened without blocking) is refused
// without reading.
func TestMapOpenFileRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ff, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	if _, err := MapOpenFile(ff); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("FIFO: %v", err)
	}
}
