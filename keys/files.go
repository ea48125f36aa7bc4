package keys

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// MaxKeyFileSize bounds every key file this package reads (allowed_signers
// files included).
const MaxKeyFileSize = 1 << 20

// ErrPermissions is wrapped by the error of a loader given a secret key
// file that group or others may read or write.
var ErrPermissions = errors.New("key file permissions are too open")

// PermissionError is a secret key file whose mode is too open. It wraps
// ErrPermissions; its message names the mode, the file and the fix, like
// ssh's: "permissions 0644 for 'k' are too open; run: chmod 600 k".
type PermissionError struct {
	Path string
	Mode os.FileMode // permission bits only
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("permissions %04o for '%s' are too open; run: chmod 600 %s", uint32(e.Mode), e.Path, shellQuote(e.Path))
}

// Unwrap returns ErrPermissions.
func (e *PermissionError) Unwrap() error { return ErrPermissions }

// ReadSecretFile reads a credential file: an HMAC key, an Ed25519 signing
// key, an age identity, a GitHub or Git token, a GitHub App private key,
// an SSH key for pushing. Every credential goes through it, so all of them
// get the same checks:
//
//   - the file is opened without blocking (O_NONBLOCK: a FIFO or device
//     planted at the path cannot hang the caller) and must be a regular
//     file (checked on the opened descriptor, so a swap after a stat
//     cannot change what is read); symlinks are followed, the target's
//     mode is what counts;
//   - on systems with Unix permissions, a mode granting anything to group
//     or others is refused with a *PermissionError (wrapping
//     ErrPermissions) that names the mode, the file and the chmod that
//     fixes it, as ssh does;
//   - at most MaxKeyFileSize bytes are read.
//
// Errors name the file, never its content.
func ReadSecretFile(path string) ([]byte, error) {
	return readKeyFile(path, true)
}

// readKeyFile reads at most MaxKeyFileSize bytes of path (see
// ReadSecretFile); secret selects the permission check.
func readKeyFile(path string, secret bool) ([]byte, error) {
	f, err := openNonblock(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	if secret && runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, &PermissionError{Path: path, Mode: st.Mode().Perm()}
	}
	if st.Size() > MaxKeyFileSize {
		return nil, fmt.Errorf("%s: %d bytes exceeds the key file limit of %d bytes", path, st.Size(), MaxKeyFileSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyFileSize+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if len(b) > MaxKeyFileSize {
		return nil, fmt.Errorf("%s: more than the key file limit of %d bytes", path, MaxKeyFileSize)
	}
	return b, nil
}

// lines splits b into lines (LF or CRLF), without terminators.
func lines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	out := strings.Split(s, "\n")
	for i, l := range out {
		out[i] = strings.TrimSuffix(l, "\r")
	}
	return out
}

// shellQuote quotes p for a POSIX shell when it holds anything beyond a
// conservative set of safe characters.
func shellQuote(p string) string {
	safe := p != ""
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+:@%,=", c)) {
			safe = false
			break
		}
	}
	if safe {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}
