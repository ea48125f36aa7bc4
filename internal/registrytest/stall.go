package registrytest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// StartSilent starts a TCP server on 127.0.0.1 that accepts every
// connection, reads whatever the client sends and never answers: a
// registry hung after accept. It returns its HOST:PORT; every connection
// is closed at the end of the test.
func StartSilent(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// Trickle is an HTTP server on 127.0.0.1 that answers every GET at once
// with 200 and a Content-Length of size (none when size <= 0: then the
// body never ends), then sends the body one zero byte per interval: a
// registry that never stops but never gets anywhere. HEADs get the same
// headers and no body; other methods 405.
type Trickle struct {
	Host string // 127.0.0.1:PORT

	mu   sync.Mutex
	sent int64
}

// StartTrickle starts a Trickle announcing size bytes (<= 0: an endless
// body), one sent per interval.
func StartTrickle(t *testing.T, size int64, interval time.Duration) *Trickle {
	t.Helper()
	tr := &Trickle{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if size > 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		fl := w.(http.Flusher)
		fl.Flush()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := int64(0); size <= 0 || i < size; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			if _, err := w.Write([]byte{0}); err != nil {
				return
			}
			fl.Flush()
			tr.mu.Lock()
			tr.sent++
			tr.mu.Unlock()
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	tr.Host = strings.TrimPrefix(srv.URL, "http://")
	return tr
}

// Sent returns how many body bytes were sent so far.
func (tr *Trickle) Sent() int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.sent
}

// StartNoRead starts an HTTP server on 127.0.0.1 that opens blob upload
// sessions (POST .../blobs/uploads/: 202 with a Location) and reports
// every blob missing (HEAD: 404), but takes the connection of any PUT
// and never reads its body: a registry that stopped accepting an upload.
// It returns its HOST:PORT.
func StartNoRead(t *testing.T) string {
	t.Helper()
	var (
		mu   sync.Mutex
		held []net.Conn
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/blobs/uploads/"):
			w.Header().Set("Location", r.URL.Path+"session")
			w.WriteHeader(http.StatusAccepted)
		case r.Method == http.MethodPut:
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
		srv.CloseClientConnections()
		srv.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://")
}
