package registrytest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Damage is what a Proxy does to one blob's GET responses.
type Damage int

// Damages.
const (
	Intact   Damage = iota
	FlipByte        // one byte in the middle of the body is changed; length kept
	Truncate        // Content-Length announces the whole blob, half the body is sent
	Missing         // 404 BLOB_UNKNOWN, as for a blob that is not stored
)

// Proxy is an HTTP server in front of a registry that forwards every
// request (pushes included: upload Locations are rewritten to the proxy)
// and damages the GET responses of chosen blobs, standing in for
// a faulty or hostile registry; it records the methods it saw.
type Proxy struct {
	Host string // 127.0.0.1:PORT

	upstream string
	mu       sync.Mutex
	damage   map[string]Damage // "sha256:<hex>"
	methods  map[string]int
	damaged  int
	before   func(*http.Request)
}

// SetBefore makes f see every request before it is forwarded; f may
// block it (to order a client's concurrent requests in a test).
func (p *Proxy) SetBefore(f func(*http.Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.before = f
}

// StartProxy starts a proxy forwarding to the registry at upstream
// (HOST:PORT, plain HTTP).
func StartProxy(t *testing.T, upstream string) *Proxy {
	p := &Proxy{upstream: upstream, damage: map[string]Damage{}, methods: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.Host = strings.TrimPrefix(srv.URL, "http://")
	return p
}

// Damage sets what happens to GETs of the blob digest ("sha256:<hex>").
func (p *Proxy) Damage(digest string, d Damage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.damage[digest] = d
}

// Methods returns how many requests of each method were forwarded.
func (p *Proxy) Methods() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.methods {
		out[k] = v
	}
	return out
}

// Damaged returns how many responses were damaged.
func (p *Proxy) Damaged() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.damaged
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.methods[r.Method]++
	d := Intact
	if i := strings.LastIndex(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet {
		d = p.damage[r.URL.Path[i+len("/blobs/"):]]
	}
	if d != Intact {
		p.damaged++
	}
	before := p.before
	p.mu.Unlock()
	if before != nil {
		before(r)
	}
	if d == Missing {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}`)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.ContentLength = r.ContentLength
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	// An upload session's Location may name the upstream: point it at the
	// proxy, so that pushes go through it too.
	if loc := resp.Header.Get("Location"); strings.HasPrefix(loc, "http://"+p.upstream+"/") {
		w.Header().Set("Location", "http://"+r.Host+strings.TrimPrefix(loc, "http://"+p.upstream))
	}
	if d == Intact || resp.StatusCode != http.StatusOK {
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	body = bytes.Clone(body)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	switch d {
	case FlipByte:
		if len(body) > 0 {
			body[len(body)/2] ^= 0x5a
		}
		w.Write(body)
	case Truncate:
		w.Write(body[:len(body)/2])
		// Returning with fewer bytes than announced makes the server
		// close the connection: the client sees an unexpected EOF.
	}
}
