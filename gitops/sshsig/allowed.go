package sshsig

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
)

// NamespaceFile is the namespace of WTXT signatures in allowed_signers
// (ssh-keygen's namespace for signing files).
const NamespaceFile = "file"

// maxAllowedSignersFile bounds the size of an allowed_signers file read by
// LoadAllowedSigners.
const maxAllowedSignersFile = 16 << 20

// Errors of the allowed_signers policy; test with errors.Is.
var (
	// ErrAllowedSigners means an allowed_signers file does not parse.
	ErrAllowedSigners = errors.New("sshsig: allowed_signers")
	// ErrNotAllowed means no allowed_signers line allows the signature
	// (unknown key, principal, namespace or validity window).
	ErrNotAllowed = errors.New("sshsig: signer not allowed")
)

// AllowedSigner is one line of an allowed_signers file (ssh-keygen(1),
// ALLOWED SIGNERS):
//
//	principals [options] keytype base64-key [comment]
//
// or a bare public key line (keytype base64-key [comment], a .pub file),
// which snapd reads as principals "*" without options: the key is trusted
// for every namespace at any time. ssh-keygen (and so git) skips bare
// lines, so a file may hold bare lines (a .pub file) or allowed_signers
// lines, not both.
type AllowedSigner struct {
	// Principals is the principals pattern-list (comma-separated
	// patterns with * and ?, a leading ! negates), as written.
	Principals string
	// CertAuthority: Key is a CA; signatures by user certificates it
	// signed are accepted (the certificate's principals must match
	// Principals and be valid at the verification time).
	CertAuthority bool
	// Namespaces is the namespaces pattern-list; "" with HasNamespaces
	// false means any namespace.
	Namespaces    string
	HasNamespaces bool
	// ValidAfter and ValidBefore bound the verification time (inclusive,
	// whole seconds); zero means unbounded.
	ValidAfter, ValidBefore time.Time
	Key                     ssh.PublicKey
	// Source is "file:line", for messages.
	Source string
}

// AllowedSigners is a parsed allowed_signers file (or several, in order).
type AllowedSigners struct {
	Lines []AllowedSigner
}

// LoadAllowedSigners reads and parses allowed_signers files (or .pub
// files) in order; see ParseAllowedSigners. Times without Z are read in
// time.Local, as ssh-keygen does.
func LoadAllowedSigners(paths ...string) (*AllowedSigners, error) {
	out := &AllowedSigners{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(f, maxAllowedSignersFile+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if len(b) > maxAllowedSignersFile {
			return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrAllowedSigners, p, maxAllowedSignersFile)
		}
		a, err := ParseAllowedSigners(p, b, time.Local)
		if err != nil {
			return nil, err
		}
		out.Lines = append(out.Lines, a.Lines...)
	}
	return out, nil
}

// Unrestricted returns signers that trust each key for every principal
// and namespace at any time (what a .pub file means).
func Unrestricted(keys ...ed25519.PublicKey) (*AllowedSigners, error) {
	out := &AllowedSigners{}
	for i, k := range keys {
		pk, err := ssh.NewPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("sshsig: trusted key %d: %w", i+1, err)
		}
		out.Lines = append(out.Lines, AllowedSigner{Principals: "*", Key: pk, Source: fmt.Sprintf("trusted key %d", i+1)})
	}
	return out, nil
}

// ParseAllowedSigners parses an allowed_signers file named name (for
// messages) as ssh-keygen does: blank lines and lines starting with #
// are skipped; the principals field may be double-quoted; options are
// comma-separated, keywords case-insensitive: cert-authority,
// namespaces="list", valid-after="time", valid-before="time" (values
// must be double-quoted, times are YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z],
// in loc unless suffixed Z). Where ssh-keygen skips a line it cannot
// parse (an unknown or repeated option, an unquoted value, a bad time or
// key), ParseAllowedSigners fails, naming name:line and the check.
func ParseAllowedSigners(name string, data []byte, loc *time.Location) (*AllowedSigners, error) {
	out := &AllowedSigners{}
	var bareLine, signersLine string
	for i, l := range bytes.Split(data, []byte("\n")) {
		line := strings.TrimRight(string(l), "\r")
		src := fmt.Sprintf("%s:%d", name, i+1)
		t := strings.TrimLeft(line, " \t")
		if t == "" || t[0] == '#' {
			continue
		}
		if !utf8.ValidString(t) {
			return nil, fmt.Errorf("%w: %s: not valid UTF-8", ErrAllowedSigners, src)
		}
		s, bare, err := parseAllowedLine(t, loc)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrAllowedSigners, src, err)
		}
		s.Source = src
		if bare {
			bareLine = src
		} else {
			signersLine = src
		}
		if bareLine != "" && signersLine != "" {
			return nil, fmt.Errorf("%w: %s: a bare key line and an allowed_signers line (%s) in one file: ssh-keygen and git skip bare key lines; put principals in front of the key", ErrAllowedSigners, bareLine, signersLine)
		}
		out.Lines = append(out.Lines, s)
	}
	return out, nil
}

// parseAllowedLine parses one line; bare reports a bare key line.
func parseAllowedLine(t string, loc *time.Location) (AllowedSigner, bool, error) {
	s, err := parseSignersLine(t, loc)
	if err == nil {
		return s, false, nil
	}
	// A bare key (a .pub line).
	if k, _, kerr := readKey(t); kerr == nil {
		if _, ok := k.(*ssh.Certificate); ok {
			return s, true, errors.New("a certificate is not a trusted key (list its CA with cert-authority)")
		}
		return AllowedSigner{Principals: "*", Key: k}, true, nil
	}
	return s, false, err
}

func parseSignersLine(t string, loc *time.Location) (AllowedSigner, error) {
	var s AllowedSigner
	// principals: a token up to white space, or double-quoted.
	var princ string
	if t[0] == '"' {
		end := strings.IndexByte(t[1:], '"')
		if end < 0 {
			return s, errors.New("principals: missing end quote")
		}
		princ, t = t[1:1+end], t[2+end:]
	} else {
		end := strings.IndexAny(t, " \t")
		if end < 0 {
			return s, errors.New("no key after the principals")
		}
		princ, t = t[:end], t[end:]
	}
	if princ == "" {
		return s, errors.New("empty principals")
	}
	s.Principals = princ
	t = strings.TrimLeft(t, " \t")
	if t == "" {
		return s, errors.New("no key after the principals")
	}
	k, _, err := readKey(t)
	if err != nil {
		// Options first, then the key.
		opts, rest, oerr := splitOptions(t)
		if oerr != nil {
			return s, oerr
		}
		if err := parseOptions(&s, opts, loc); err != nil {
			return s, err
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return s, errors.New("no key after the options")
		}
		if k, _, err = readKey(rest); err != nil {
			return s, fmt.Errorf("key: %v", err)
		}
	}
	if _, ok := k.(*ssh.Certificate); ok {
		return s, errors.New("key: a certificate cannot be listed as a key (list its CA with cert-authority)")
	}
	s.Key = k
	return s, nil
}

// readKey reads "keytype base64 [comment]" at the start of t.
func readKey(t string) (ssh.PublicKey, string, error) {
	f := strings.Fields(t)
	if len(f) < 2 {
		return nil, "", errors.New("want keytype and base64 key data")
	}
	raw, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return nil, "", fmt.Errorf("key data is not base64: %v", err)
	}
	k, err := ssh.ParsePublicKey(raw)
	if err != nil {
		return nil, "", err
	}
	if k.Type() != f[0] {
		return nil, "", fmt.Errorf("key data holds a %s key although the line says %s", k.Type(), f[0])
	}
	return k, strings.Join(f[2:], " "), nil
}

// splitOptions cuts the options field (up to white space outside double
// quotes) from t.
func splitOptions(t string) (string, string, error) {
	inQuote := false
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c == '\\' && inQuote && i+1 < len(t) && t[i+1] == '"':
			i++
		case c == '"':
			inQuote = !inQuote
		case (c == ' ' || c == '\t') && !inQuote:
			return t[:i], t[i:], nil
		}
	}
	if inQuote {
		return "", "", errors.New("options: missing end quote")
	}
	return t, "", nil
}

// parseOptions parses the options field as ssh-keygen's sshsigopt_parse.
func parseOptions(s *AllowedSigner, opts string, loc *time.Location) error {
	var seenAfter, seenBefore bool
	for opts != "" {
		name, rest, _ := strings.Cut(opts, "=")
		switch {
		case hasKeyword(opts, "cert-authority") && (len(opts) == len("cert-authority") || opts[len("cert-authority")] == ','):
			s.CertAuthority = true
			opts = opts[len("cert-authority"):]
		case strings.ContainsRune(opts, '=') && !strings.ContainsRune(name, ','):
			val, after, err := dequote(rest)
			if err != nil {
				return fmt.Errorf("option %s: %v", name, err)
			}
			switch strings.ToLower(name) {
			case "namespaces":
				if s.HasNamespaces {
					return errors.New(`multiple "namespaces" clauses`)
				}
				s.Namespaces, s.HasNamespaces = val, true
			case "valid-after":
				if seenAfter {
					return errors.New(`multiple "valid-after" clauses`)
				}
				seenAfter = true
				if s.ValidAfter, err = parseSSHTime(val, loc); err != nil {
					return fmt.Errorf(`invalid "valid-after" time %q: %v`, val, err)
				}
			case "valid-before":
				if seenBefore {
					return errors.New(`multiple "valid-before" clauses`)
				}
				seenBefore = true
				if s.ValidBefore, err = parseSSHTime(val, loc); err != nil {
					return fmt.Errorf(`invalid "valid-before" time %q: %v`, val, err)
				}
			default:
				return fmt.Errorf("unknown option %q", name)
			}
			opts = after
		default:
			o, _, _ := strings.Cut(opts, ",")
			return fmt.Errorf("unknown option %q", o)
		}
		if opts == "" {
			break
		}
		if opts[0] != ',' {
			return fmt.Errorf("unknown key option at %q", opts)
		}
		opts = opts[1:]
		if opts == "" {
			return errors.New("options end in a comma")
		}
	}
	return nil
}

func hasKeyword(s, kw string) bool { return len(s) >= len(kw) && strings.EqualFold(s[:len(kw)], kw) }

// dequote reads a double-quoted value at the start of s (\" is a quote
// inside it) and returns it and what follows.
func dequote(s string) (string, string, error) {
	if s == "" || s[0] != '"' {
		return "", "", errors.New("value must be double-quoted")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case s[i] == '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", errors.New("missing end quote")
}

// parseSSHTime parses OpenSSH's absolute time: YYYYMMDD, YYYYMMDDHHMM or
// YYYYMMDDHHMMSS, in loc, or in UTC with a Z suffix.
func parseSSHTime(v string, loc *time.Location) (time.Time, error) {
	if strings.HasSuffix(v, "Z") || strings.HasSuffix(v, "z") {
		v, loc = v[:len(v)-1], time.UTC
	}
	var layout string
	switch len(v) {
	case 8:
		layout = "20060102"
	case 12:
		layout = "200601021504"
	case 14:
		layout = "20060102150405"
	default:
		return time.Time{}, errors.New("want YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z]")
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return time.Time{}, errors.New("want digits")
		}
	}
	t, err := time.ParseInLocation(layout, v, loc)
	if err != nil {
		return time.Time{}, err
	}
	if t.Unix() <= 0 {
		return time.Time{}, errors.New("before 1970")
	}
	return t, nil
}

// matchPatternList is OpenSSH's match_pattern_list: s must match a
// pattern of the comma-separated list and no negated (!) one.
func matchPatternList(s, list string) bool {
	positive := false
	for _, p := range strings.Split(list, ",") {
		neg := strings.HasPrefix(p, "!")
		if neg {
			p = p[1:]
		}
		if p == "" {
			continue
		}
		if matchPattern(s, p) {
			if neg {
				return false
			}
			positive = true
		}
	}
	return positive
}

// matchPattern matches s against a pattern with * (any run) and ? (any
// one character).
func matchPattern(s, p string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if matchPattern(s[i:], p) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			s, p = s[1:], p[1:]
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			s, p = s[1:], p[1:]
		}
	}
	return s == ""
}

// Verification is what Verify found.
type Verification struct {
	// Principal is the principal the signature was accepted for.
	Principal string
	// Fingerprint is the SHA-256 fingerprint of the signing key (of the
	// certificate's key for a certificate).
	Fingerprint string
	// Source is the allowed_signers line ("file:line") that allowed it.
	Source string
}

// Verify checks an armored SSHSIG over message as `ssh-keygen -Y
// find-principals` then `ssh-keygen -Y verify -n namespace -I principal`
// do with Overify-time=at, the way git verifies commits and tags: the
// first line (in file order) whose key is the signing key (or, with
// cert-authority, signed the signing certificate) and that is valid at
// at gives the principals; the signature is accepted for the first of
// them that some line allows for namespace at at. The error, wrapping
// ErrNotAllowed, ErrNamespace, ErrBadSignature or ErrMalformed, says
// which check failed on which line.
func (a *AllowedSigners) Verify(namespace string, message io.Reader, armored []byte, at time.Time) (*Verification, error) {
	sig, err := Parse(armored)
	if err != nil {
		return nil, err
	}
	signKey := sig.PublicKey
	if c, ok := signKey.(*ssh.Certificate); ok {
		signKey = c.Key
	}
	res := &Verification{Fingerprint: ssh.FingerprintSHA256(signKey)}
	if sig.Namespace != namespace {
		return res, fmt.Errorf("%w: signature is for namespace %q, want %q", ErrNamespace, sig.Namespace, namespace)
	}
	principals, err := a.findPrincipals(sig.PublicKey, at)
	if err != nil {
		return res, err
	}
	var reasons []string
	for _, p := range principals {
		src, err := a.allowed(sig.PublicKey, p, namespace, at)
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		data, err := toSign(namespace, sig.HashAlg, message)
		if err != nil {
			return res, err
		}
		if err := signKey.Verify(data, sig.Sig); err != nil {
			return res, fmt.Errorf("%w: %v", ErrBadSignature, err)
		}
		res.Principal, res.Source = p, src
		return res, nil
	}
	return res, fmt.Errorf("signed by key %s: %s (%w)", res.Fingerprint, strings.Join(reasons, "; "), ErrNotAllowed)
}

// findPrincipals is ssh-keygen -Y find-principals: the principals of the
// first line that matches the key and is valid at at (no namespace).
func (a *AllowedSigners) findPrincipals(key ssh.PublicKey, at time.Time) ([]string, error) {
	var reasons []string
	for i := range a.Lines {
		l := &a.Lines[i]
		ps, err := l.match(key, "", "", at)
		if err == errNoKey {
			continue
		}
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		return ps, nil
	}
	what := key.Type() + " key " + ssh.FingerprintSHA256(key)
	if c, ok := key.(*ssh.Certificate); ok {
		what = "a certificate for " + c.Key.Type() + " key " + ssh.FingerprintSHA256(c.Key) + " from CA " + ssh.FingerprintSHA256(c.SignatureKey)
	}
	if len(reasons) == 0 {
		return nil, fmt.Errorf("signed by %s, which is not among the %d trusted key(s) (%w)", what, len(a.Lines), ErrNotAllowed)
	}
	return nil, fmt.Errorf("signed by %s: %s (%w)", what, strings.Join(reasons, "; "), ErrNotAllowed)
}

// allowed is ssh-keygen -Y verify's search: some line allows key for
// principal and namespace at at. It returns that line's source.
func (a *AllowedSigners) allowed(key ssh.PublicKey, principal, namespace string, at time.Time) (string, error) {
	var reasons []string
	for i := range a.Lines {
		l := &a.Lines[i]
		if _, err := l.match(key, principal, namespace, at); err == nil {
			return l.Source, nil
		} else if err != errNoKey {
			reasons = append(reasons, err.Error())
		}
	}
	if len(reasons) == 0 {
		return "", fmt.Errorf("principal %q: no line lists it with this key", principal)
	}
	return "", fmt.Errorf("principal %q: %s", principal, strings.Join(reasons, "; "))
}

var errNoKey = errors.New("key not on this line")

// match is ssh-keygen's check_allowed_keys_line: principal "" means any
// (find-principals; the result is then the principals the line gives),
// namespace "" means not checked.
func (l *AllowedSigner) match(key ssh.PublicKey, principal, namespace string, at time.Time) ([]string, error) {
	if principal != "" && !matchPatternList(principal, l.Principals) {
		return nil, errNoKey
	}
	cert, isCert := key.(*ssh.Certificate)
	var principals []string
	switch {
	case !l.CertAuthority:
		// A certificate never matches a plain line (ssh-keygen compares
		// the whole key, certificate included).
		if isCert || !bytes.Equal(key.Marshal(), l.Key.Marshal()) {
			return nil, errNoKey
		}
		if principal != "" {
			principals = []string{principal}
		} else {
			principals = strings.Split(l.Principals, ",")
		}
	case isCert && bytes.Equal(cert.SignatureKey.Marshal(), l.Key.Marshal()):
		if principal != "" {
			if err := checkCert(cert, principal, at); err != nil {
				return nil, fmt.Errorf("%s: certificate not authorized: %v", l.Source, err)
			}
			principals = []string{principal}
		} else {
			for _, p := range cert.ValidPrincipals {
				if matchPatternList(p, l.Principals) && checkCert(cert, p, at) == nil {
					principals = append(principals, p)
				}
			}
			if len(principals) == 0 {
				if err := checkCert(cert, "", at); err != nil {
					return nil, fmt.Errorf("%s: certificate not authorized: %v", l.Source, err)
				}
				return nil, fmt.Errorf("%s: none of the certificate's principals %q match %q", l.Source, cert.ValidPrincipals, l.Principals)
			}
		}
	default:
		return nil, errNoKey
	}
	if namespace != "" && l.HasNamespaces && !matchPatternList(namespace, l.Namespaces) {
		return nil, fmt.Errorf("%s: key is not permitted for use in signature namespace %q (namespaces=%q)", l.Source, namespace, l.Namespaces)
	}
	if err := l.validAt(at); err != nil {
		return nil, err
	}
	return principals, nil
}

// validAt checks the line's validity window at at (whole seconds, both
// ends inclusive, as ssh-keygen compares).
func (l *AllowedSigner) validAt(at time.Time) error {
	t := at.Unix()
	if !l.ValidAfter.IsZero() && t < l.ValidAfter.Unix() {
		return fmt.Errorf("%s: key is not yet valid: verify time %s < valid-after %s", l.Source, at.Format(time.RFC3339), l.ValidAfter.Format(time.RFC3339))
	}
	if !l.ValidBefore.IsZero() && t > l.ValidBefore.Unix() {
		return fmt.Errorf("%s: key has expired: verify time %s > valid-before %s", l.Source, at.Format(time.RFC3339), l.ValidBefore.Format(time.RFC3339))
	}
	return nil
}

// checkCert is OpenSSH's sshkey_cert_check_authority for a user
// certificate used to sign (principal required; "" checks all but the
// principal) plus the CA's signature over the certificate.
func checkCert(c *ssh.Certificate, principal string, at time.Time) error {
	if c.CertType != ssh.UserCert {
		return errors.New("not a user certificate")
	}
	t := at.Unix()
	if t < 0 || uint64(t) < c.ValidAfter {
		return errors.New("certificate not yet valid")
	}
	if c.ValidBefore != ssh.CertTimeInfinity && uint64(t) >= c.ValidBefore {
		return errors.New("certificate expired")
	}
	if len(c.ValidPrincipals) == 0 {
		return errors.New("certificate lacks principal list")
	}
	if principal != "" {
		ok := false
		for _, p := range c.ValidPrincipals {
			if p == principal {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("name %q is not a listed principal", principal)
		}
	}
	// The CA's signature over the certificate (Go's CertChecker with
	// the principal and clock already checked above).
	// ssh-keygen does not look at critical options for signatures.
	cc := &ssh.CertChecker{Clock: func() time.Time { return at }}
	for o := range c.CriticalOptions {
		cc.SupportedCriticalOptions = append(cc.SupportedCriticalOptions, o)
	}
	if err := cc.CheckCert(c.ValidPrincipals[0], c); err != nil {
		return err
	}
	return nil
}

// Ed25519Keys returns the Ed25519 keys of the lines that allow namespace
// at at, for signatures that name a key but carry no certificate (WTXT
// and seal signatures): plain-key lines only (a cert-authority line never
// allows them), any principal.
func (a *AllowedSigners) Ed25519Keys(namespace string, at time.Time) []ed25519.PublicKey {
	var out []ed25519.PublicKey
	seen := map[string]bool{}
	for i := range a.Lines {
		l := &a.Lines[i]
		if l.CertAuthority || l.HasNamespaces && !matchPatternList(namespace, l.Namespaces) || l.validAt(at) != nil {
			continue
		}
		ck, ok := l.Key.(ssh.CryptoPublicKey)
		if !ok {
			continue
		}
		ed, ok := ck.CryptoPublicKey().(ed25519.PublicKey)
		if !ok || seen[string(ed)] {
			continue
		}
		seen[string(ed)] = true
		out = append(out, ed)
	}
	return out
}

// Excluded says, for each plain-key line that Ed25519Keys leaves out
// for namespace at at, which check excludes it ("file:line: key has
// expired: ..."); cert-authority lines are listed as never allowing
// signatures without a certificate.
func (a *AllowedSigners) Excluded(namespace string, at time.Time) []string {
	var out []string
	for i := range a.Lines {
		l := &a.Lines[i]
		switch {
		case l.CertAuthority:
			out = append(out, l.Source+": cert-authority: a CA key allows only signatures by certificates, which these signatures cannot carry")
		case l.HasNamespaces && !matchPatternList(namespace, l.Namespaces):
			out = append(out, fmt.Sprintf("%s: key is not permitted for use in signature namespace %q (namespaces=%q)", l.Source, namespace, l.Namespaces))
		default:
			if err := l.validAt(at); err != nil {
				out = append(out, err.Error())
			}
		}
	}
	return out
}
