package review

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-github/v60/github"

	"github.com/snapd-ml/snapd/keys"
)

// TokenSource yields the value of the Authorization header for API calls.
// Implementations never log or wrap the token into errors.
type TokenSource interface {
	Authorization(ctx context.Context) (string, error)
}

// StaticToken is a personal access token or a GitHub Actions GITHUB_TOKEN.
type StaticToken string

// Authorization implements TokenSource.
func (t StaticToken) Authorization(context.Context) (string, error) {
	return "Bearer " + string(t), nil
}

// String hides the token (so a stray %v cannot print it).
func (t StaticToken) String() string { return "StaticToken(redacted)" }

// ErrNoToken is returned when no credentials are configured.
var ErrNoToken = errors.New("github: no token")

// TokenFromEnv reads a token from the environment variable name.
func TokenFromEnv(getenv func(string) string, name string) (StaticToken, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return "", fmt.Errorf("%w: environment variable %s is empty or unset", ErrNoToken, name)
	}
	if strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("github: environment variable %s holds whitespace inside the token", name)
	}
	return StaticToken(v), nil
}

// maxTokenFile bounds a token file (tokens are < 300 bytes).
const maxTokenFile = 4096

// TokenFromFile reads a token from path (surrounding whitespace trimmed).
func TokenFromFile(path string) (StaticToken, error) {
	b, err := keys.ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("github: token file: %w", err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("github: token file %s: %d bytes, larger than the limit %d", path, len(b), maxTokenFile)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%w: token file %s is empty", ErrNoToken, path)
	}
	if strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("github: token file %s: more than one token or embedded whitespace", path)
	}
	return StaticToken(v), nil
}

// AppConfig is a GitHub App installation to act as.
type AppConfig struct {
	// AppID is the App's ID (or client ID): the JWT's issuer.
	AppID string
	// InstallationID is the installation whose token is requested.
	InstallationID int64
	// PrivateKeyPEM is the App's private key (PKCS#1 or PKCS#8 PEM).
	PrivateKeyPEM []byte
	// Repositories restricts the token to these repository names (without
	// owner); empty = every repository of the installation.
	Repositories []string
	// Permissions requested for the token; nil means the least the review
	// needs: contents:read, pull_requests:write (add metadata:read
	// implicitly granted by GitHub).
	Permissions *github.InstallationPermissions
}

// DefaultAppPermissions are the permissions requested for an installation
// token when AppConfig.Permissions is nil.
func DefaultAppPermissions() *github.InstallationPermissions {
	return &github.InstallationPermissions{Contents: github.String("read"), PullRequests: github.String("write")}
}

// appTokenSource mints installation tokens: an RS256 JWT signed with the
// App's key authenticates POST /app/installations/{id}/access_tokens; the
// token is cached until five minutes before it expires.
type appTokenSource struct {
	cfg AppConfig
	key *rsa.PrivateKey
	gh  *github.Client // authorizes with the JWT
	now func() time.Time

	mu      sync.Mutex
	token   string
	expires time.Time
}

// jwtLifetime is below GitHub's 10-minute maximum; iat is backdated 60 s
// against clock drift, as GitHub recommends.
const jwtLifetime = 9 * time.Minute

func (a *appTokenSource) jwt() (string, error) {
	now := a.now()
	claims := jwt.RegisteredClaims{
		IssuedAt:  jwt.NewNumericDate(now.Add(-60 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(jwtLifetime)),
		Issuer:    a.cfg.AppID,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(a.key)
	if err != nil {
		return "", fmt.Errorf("github app: sign JWT: %w", err)
	}
	return s, nil
}

// Authorization implements TokenSource.
func (a *appTokenSource) Authorization(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && a.now().Before(a.expires.Add(-5*time.Minute)) {
		return "Bearer " + a.token, nil
	}
	perms := a.cfg.Permissions
	if perms == nil {
		perms = DefaultAppPermissions()
	}
	tok, _, err := a.gh.Apps.CreateInstallationToken(ctx, a.cfg.InstallationID, &github.InstallationTokenOptions{
		Repositories: a.cfg.Repositories, Permissions: perms})
	if err != nil {
		return "", fmt.Errorf("github app: create installation token for installation %d: %w", a.cfg.InstallationID, err)
	}
	if tok.GetToken() == "" {
		return "", fmt.Errorf("github app: installation %d: the response holds no token", a.cfg.InstallationID)
	}
	a.token = tok.GetToken()
	a.expires = tok.GetExpiresAt().Time
	if a.expires.IsZero() {
		a.expires = a.now().Add(time.Hour)
	}
	return "Bearer " + a.token, nil
}

// Invalidate implements Invalidator: the cached installation token is
// dropped when it is the one GitHub refused.
func (a *appTokenSource) Invalidate(authorization string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && authorization == "Bearer "+a.token {
		a.token, a.expires = "", time.Time{}
	}
}

// jwtAuth authorizes App-level calls with a fresh JWT.
type jwtAuth struct{ a *appTokenSource }

func (j jwtAuth) Authorization(context.Context) (string, error) {
	s, err := j.a.jwt()
	if err != nil {
		return "", err
	}
	return "Bearer " + s, nil
}

func parseAppKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	k, err := jwt.ParseRSAPrivateKeyFromPEM(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("github app: private key: %w", err)
	}
	return k, nil
}

// LoadAppKey reads an App private key PEM file (at most 64 KiB).
func LoadAppKey(path string) ([]byte, error) {
	b, err := keys.ReadSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("github app: private key: %w", err)
	}
	return b, nil
}
