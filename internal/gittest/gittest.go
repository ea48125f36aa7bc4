// Package gittest holds test helpers for gitops and its subpackages,
// pipeline and cmd/snapd: a generator of small WTXT-shaped files, git CLI
// wrappers, a Git smart HTTP remote (the real git-http-backend behind
// net/http/cgi) whose availability and credentials tests can switch, and an
// SSH remote.
package gittest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Array is one array of a generated WTXT-like test file.
type Array struct {
	Name  string
	Data  []byte
	Chunk int // raw bytes per chunk (0: 32768, no idx line)
}

// WTXT renders a small file with the WTXT 1.1 line structure (header,
// arr/idx/ch/base64+parity/endch/endarr, endwtxt) and correct sha256_all and
// merkle values, so the splitter and header parser see realistic input
// without depending on formats/wtxt. It returns the file and merkle_this.
func WTXT(gen uint64, merklePrev string, arrays []Array) ([]byte, string) {
	if merklePrev == "" {
		merklePrev = strings.Repeat("0", 64)
	}
	var body bytes.Buffer
	all := sha256.New()
	for _, a := range arrays {
		sum := sha256.Sum256(a.Data)
		arr := fmt.Sprintf("arr name=%s dtype=u8 shape=%d order=C bytes=%d sha256=%x hmac=%s salt=%s",
			a.Name, len(a.Data), len(a.Data), sum, strings.Repeat("0", 64), strings.Repeat("0", 16))
		all.Write([]byte(arr))
		all.Write(a.Data)
		body.WriteString(arr + "\n")
		chunk := a.Chunk
		if chunk == 0 {
			chunk = 32768
		}
		if len(a.Data) > 0 { // WTXT row-blocks every non-empty array of rank >= 1
			rpc := chunk
			if len(a.Data) <= chunk {
				rpc = 65536 // the canonical value for a single chunk
			}
			fmt.Fprintf(&body, "idx rows_per_chunk=%d row_size=1 row_blocking=on\n", rpc)
		}
		for ix, off := 0, 0; off < len(a.Data) || ix == 0; ix++ {
			end := min(off+chunk, len(a.Data))
			raw := a.Data[off:end]
			cs := sha256.Sum256(raw)
			crc := crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli))
			lines := (len(raw) + 56) / 57
			fmt.Fprintf(&body, "ch ix=%06d off=%012d len=%d sha256=%x crc32c=%08x b64=on width=76 lines=%d\n", ix, off, len(raw), cs, crc, lines)
			enc := base64.StdEncoding.EncodeToString(raw)
			for len(enc) > 0 {
				n := min(76, len(enc))
				var p byte
				for i := 0; i < n; i++ {
					p ^= enc[i]
				}
				fmt.Fprintf(&body, "%s %x\n", enc[:n], p&15)
				enc = enc[n:]
			}
			body.WriteString("endch\n")
			off = end
			if off >= len(a.Data) {
				break
			}
		}
		body.WriteString("endarr\n")
	}
	sa := all.Sum(nil)
	genText := fmt.Sprintf("%06d", gen)
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(gen) * time.Minute).Format("2006-01-02T15:04:05Z")
	mp, _ := hex.DecodeString(merklePrev)
	mh := sha256.New()
	mh.Write(mp)
	mh.Write(sa)
	mh.Write([]byte(ts + genText + "test-build"))
	mt := hex.EncodeToString(mh.Sum(nil))
	var out bytes.Buffer
	fmt.Fprintf(&out, "WTXT 1\nmeta schema=test gen=%s ts=%s build=test-build endian=LE host=h cuda=none\n", genText, ts)
	out.WriteString("cap ext=crc32c,line_parity,arr_hmac,delta_v2,row_blocking\n")
	fmt.Fprintf(&out, "root sha256_all=%x merkle_prev=%s merkle_this=%s fastxor=0000000000000000\n", sa, merklePrev, mt)
	out.Write(body.Bytes())
	out.WriteString("endwtxt\n")
	return out.Bytes(), mt
}

// Pseudo returns n deterministic pseudo-random bytes.
func Pseudo(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitRun(dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func GitRun(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// WriteFile writes data to dir/name with mode 0600 (tests write
// credentials with it; keys.ReadSecretFile refuses group/other access).
func WriteFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// HeldRemote creates a bare repository dir/remote.git whose pre-receive
// hook, once the pack is in, writes to the FIFO started and then waits
// until something is written to the FIFO release: a push that a test
// holds and lets go of, event by event.
func HeldRemote(t testing.TB, dir string) (remote, started, release string) {
	t.Helper()
	remote = filepath.Join(dir, "remote.git")
	Git(t, dir, "init", "-q", "--bare", remote)
	started, release = filepath.Join(dir, "started"), filepath.Join(dir, "release")
	for _, p := range []string{started, release} {
		if err := mkfifo(p); err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
	}
	hook := "#!/bin/sh\ncat >/dev/null\necho held > '" + started + "'\ncat '" + release + "' >/dev/null\n"
	if err := os.WriteFile(filepath.Join(remote, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	return remote, started, release
}
