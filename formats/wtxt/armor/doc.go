// Package armor wraps WTXT files (snapshots, deltas, WSUM) in age ASCII
// armor and writes the verify-only "seal": a one-line, plaintext, signed
// sidecar that lets a CI job holding only public keys prove, without
// decrypting, that an armored file is exactly what the key holder produced
// and that its generation continues the Merkle chain.
//
// # Armor
//
// Encryption is filippo.io/age with its armor package: the output is
//
//	-----BEGIN AGE ENCRYPTED FILE-----
//	<base64, 64 columns, last line shorter>
//	-----END AGE ENCRYPTED FILE-----
//
// followed by one LF, exactly what `age -a` writes, so `age -d` decrypts
// snapd's files and snapd decrypts `age -a` output. Recipients are X25519
// (age1...) or ssh-ed25519 public keys. NewWriter is the writer-shaped
// API (as age.Encrypt is): a producer such as the WTXT encoder or the
// delta writes straight into it, no pipe or goroutine; Encrypt copies a
// reader through it.
//
// # Seal (sidecar) format, WSEAL 1
//
// The seal of an armored file OUT is OUT.wseal (see SealPath): one ASCII
// line, then one LF, fields in this fixed order, separated by single spaces:
//
//	WSEAL 1 kind=<wtxt|delta|wsum> bytes=<DEC> sha256=<hex64> gen=<DEC6> ts=<YYYY-MM-DDTHH:MM:SSZ> build=<TOK> sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> keyid=<hex16> sign=<base64 88>
//
// bytes and sha256 are the size and SHA-256 of the exact armored bytes.
// gen, ts, build, sha256_all, merkle_prev and merkle_this are the values of
// the generation inside: the snapshot's header; for a delta, its target's;
// for a streamed snapshot, the WSUM's final values.
//
// sign is an Ed25519 signature over every byte of the line before
// " keyid=" (from "WSEAL" through the merkle_this value); keyid is the first
// 8 bytes of BLAKE3-256 of the public key, as in WTXT. Without a signing key
// both fields are left out and the seal is reported unsigned. The prefix
// "WSEAL 1 " never begins a WTXT or WSUM signed message (those start
// "WTXT 1\n"), so a seal signature cannot be replayed as a snapshot
// signature or the reverse.
//
// A verifier with public keys only checks: the line grammar; the signature
// against a trusted key; bytes and sha256 against the armored file; that
// the armored file is ASCII-clean armor (header line, 64-column base64,
// footer, LF only); that merkle_this = SHA-256(merkle_prev || sha256_all ||
// ts || gen || build) as in WTXT; and, when the previous generation's
// merkle_this is known, that merkle_prev equals it (Seal.Check). With an
// age identity VerifySealed additionally decrypts, fully verifies the
// plaintext and checks it against the seal (Seal.MatchHeader).
package armor
