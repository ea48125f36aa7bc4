// Package keys loads and generates the key material snapd uses:
//
//   - Ed25519 signing keys in OpenSSH format (the files `ssh-keygen -t
//     ed25519` writes), LoadSigner;
//   - Ed25519 public keys, either `.pub` lines (`ssh-ed25519 AAAA... comment`)
//     or git/OpenSSH `allowed_signers` lines (`principals [options]
//     ssh-ed25519 AAAA...`), LoadPublicKeys / ParsePublicKey;
//   - HMAC keys: 64 hex digits (32 bytes) plus an optional newline,
//     LoadHMACKey;
//   - age identities (age-keygen files, or OpenSSH private keys) and
//     recipients (age1... and ssh-ed25519/ssh-rsa lines),
//     LoadAgeIdentities / LoadAgeRecipients;
//   - a fresh set of all of the above, Generate (`snapd keygen DIR`);
//   - the WTXT key id of a public key, KeyID.
//
// Every credential file — signing key, HMAC key, age identities, and
// outside this package the GitHub/Git token files, the GitHub App private
// key and the SSH key used for pushing — is read by one function,
// ReadSecretFile: it is refused, like ssh refuses it, when its mode grants
// any access to group or others (the error wraps ErrPermissions and says
// which chmod fixes it), it is opened without blocking and must be a
// regular file (a FIFO at the path cannot hang the daemon), and at most
// MaxKeyFileSize bytes are read. Errors name the file and,
// for line-based files, the line; they never quote secret material.
//
// Decisions:
//   - Only unencrypted OpenSSH private keys are supported: snapd runs
//     unattended and cannot prompt for a passphrase (ErrEncrypted).
//   - In public key files every non-comment line must hold an ssh-ed25519
//     key: a line with another key type, a certificate or the
//     allowed_signers option cert-authority is an error, not skipped, so
//     a trust file is never silently narrower than it looks. Other
//     allowed_signers options (namespaces=, valid-after=, valid-before=)
//     are accepted and ignored: WTXT signatures have no namespace or time
//     of signing to check them against. Repeated keys are returned once.
//   - Generate checks that none of the five files exists before writing
//     any, writes each atomically (internal/atomicfile: temp file, fsync,
//     rename, fsync dir), and removes the files it wrote when a later one
//     fails. A file created by someone else between the check and the
//     rename would be replaced; snapd keygen is not meant to race.
package keys
