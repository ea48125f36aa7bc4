package gittest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// SilentRemote is a TCP server on 127.0.0.1 that accepts connections and
// never answers (a stalled Git server). It returns the HTTP remote URL and
// a channel that receives once per accepted connection (dropped when
// nobody reads it). Connections and the listener close at test cleanup.
func SilentRemote(t testing.TB) (url string, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan struct{}, 64)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case acc <- struct{}{}:
			default:
			}
			go io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + l.Addr().String() + "/r.git", acc
}
