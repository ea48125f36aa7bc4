package oci

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/snapd-ml/snapd/internal/registrytest"
)

// tokenServer is a Docker token-auth server (distribution's token spec):
// it checks basic credentials and issues ES256 JWTs with an x5c header the
// registry verifies against its root certificate bundle.
type tokenServer struct {
	srv              *httptest.Server
	user, pass       string
	service, issuer  string
	key              *ecdsa.PrivateKey
	der              []byte
	issued, rejected atomic.Int64
	// pullOnly grants only the "pull" action, whatever the client asks
	// for: a read-only credential.
	pullOnly bool
}

func newTokenServer(t *testing.T, user, pass, service, issuer string) (*tokenServer, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "snapd test token issuer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "token-ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := &tokenServer{user: user, pass: pass, service: service, issuer: issuer, key: key, der: der}
	ts.srv = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.srv.Close)
	return ts, bundle
}

func (ts *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	u, p, ok := r.BasicAuth()
	if !ok || u != ts.user || p != ts.pass || r.URL.Query().Get("service") != ts.service {
		ts.rejected.Add(1)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var access []map[string]any
	for _, sc := range r.URL.Query()["scope"] {
		// repository:NAME:ACTIONS
		parts := strings.Split(sc, ":")
		if len(parts) != 3 {
			continue
		}
		actions := strings.Split(parts[2], ",")
		if ts.pullOnly {
			actions = slices.DeleteFunc(actions, func(a string) bool { return a != "pull" })
		}
		access = append(access, map[string]any{"type": parts[0], "name": parts[1], "actions": actions})
	}
	now := time.Now()
	claims := jwt.MapClaims{
		"iss": ts.issuer, "sub": u, "aud": ts.service,
		"exp": now.Add(5 * time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "iat": now.Unix(),
		"jti":    base64.RawURLEncoding.EncodeToString(big.NewInt(now.UnixNano()).Bytes()),
		"access": access,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["x5c"] = []string{base64.StdEncoding.EncodeToString(ts.der)}
	s, err := tok.SignedString(ts.key)
	if err != nil {
		http.Error(w, "sign", http.StatusInternalServerError)
		return
	}
	ts.issued.Add(1)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"token": s, "access_token": s, "expires_in": 300})
}

// TestRegistryBearerToken: the Docker token flow (WWW-Authenticate:
// Bearer realm=...) against a registry with token auth; credentials from a
// Docker config.json; the password and tokens never reach the log.
func TestRegistryBearerToken(t *testing.T) {
	const user, pass = "tok-user", "tok-password-ABC"
	ts, bundle := newTokenServer(t, user, pass, "snapd-registry", "snapd-test-issuer")
	reg := registrytest.StartToken(t, ts.srv.URL+"/token", "snapd-registry", "snapd-test-issuer", bundle)

	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := filepath.Join(t.TempDir(), "config.json")
	dc, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))}}})
	os.WriteFile(cfg, dc, 0o600)
	repo, err := Open(reg.Host+"/snapd/tok", Options{DockerConfig: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	g1 := genWTXT(t, 1, 0, 0)
	r1, skel := pushBytes(t, repo, g1, 1<<20)
	if r1.Uploaded != 5 || ts.issued.Load() == 0 {
		t.Fatalf("push %+v, %d tokens issued", r1.PushStats, ts.issued.Load())
	}
	got, err := assembleFrom(t, repo, skel)
	if err != nil || !bytes.Equal(got, g1) {
		t.Fatalf("assemble: %v", err)
	}
	if strings.Contains(logBuf.String(), pass) || strings.Contains(logBuf.String(), "eyJ") {
		t.Fatal("log holds a secret")
	}

	// Wrong password: the token server refuses, the push fails.
	bad, _ := Open(reg.Host+"/snapd/tok", Options{Username: user, Password: "nope-nope"})
	if _, err := bad.PushWTXT(context.Background(), bytes.NewReader(genWTXT(t, 2, 0, 10)), "g2.wtxt", &bytes.Buffer{}, 0); err == nil {
		t.Fatal("push with a wrong password succeeded")
	} else if strings.Contains(err.Error(), "nope-nope") {
		t.Fatal("error echoes the password")
	}
	if ts.rejected.Load() == 0 {
		t.Fatal("token server never saw the wrong password")
	}
}
