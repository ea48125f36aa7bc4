package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
)

// Flags that several commands take are defined here, once: a group is a
// struct whose register method defines its flags on a command's flag set,
// and a flag shared outside a group has its help text here. A flag name
// means one thing with one help text in every command that has it
// (TestFlagHelpTextsAgree); the few names that mean different things in
// different commands are listed in that test with their reasons.

// Help texts of flags shared outside the groups below.
const (
	usageJSON       = "print JSON (docs/JSON.md)"
	usageLossy      = "allow dropping what the target format cannot hold (each dropped item printed on stderr)"
	usageMarkdown   = "print Markdown (for a pull-request comment)"
	usagePrincipal  = "allowed_signers principal (default snapd@HOSTNAME)"
	usageFrom       = "input format (default: detect)"
	usageTo         = "output format (default: from OUT's extension)"
	usageBuild      = "build identifier"
	usageRows       = "rows per chunk for row-blocked arrays (0 = profile default)"
	usageSignKey    = "OpenSSH Ed25519 private key to sign with (mode 0600)"
	usageHMACKeyOut = "HMAC key file (64 hex chars, mode 0600)"
	usageEncryptTo  = "age recipients file: wrap what is written in age ASCII armor and write its WSEAL seal beside it (FILE.wseal)"
	usageIdentity   = "age identity file (age-keygen or OpenSSH ed25519) that decrypts an armored input"
	usageWSUMIn     = "WSUM of a streamed (root_pending) WTXT input, verified together with it (default: the input with .wtxt replaced by .wsum, if there)"
	usageSince      = "start at this revision (commit or tag, e.g. gen-000120): its generation is the trusted chain anchor (its merkle_prev is not checked)"
	usageDryRunGC   = "only report what would be deleted"
)

// ociTargetFlags name an OCI registry repository: --oci-repository and
// --oci-insecure. snapd run takes only these (the rest of store.oci comes
// from its config).
type ociTargetFlags struct {
	repository string
	insecure   bool
}

func (f *ociTargetFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.repository, "oci-repository", "", "OCI repository HOST[:PORT]/NAME holding the skeleton layout's segment blobs (plain HTTP only for loopback hosts or with --oci-insecure)")
	fs.BoolVar(&f.insecure, "oci-insecure", false, "allow plain HTTP to a non-loopback registry")
}

// ociReadFlags are what a command that only reads from (or deletes in) a
// registry takes: the repository, its credentials and the timeouts; not
// the upload flags of ociWriteFlags.
type ociReadFlags struct {
	ociTargetFlags
	username     string
	passwordFile string
	dockerConfig string
	// timeout bounds connecting, the TLS handshake and the wait for
	// response headers; stall a body that stops moving (oci.Timeouts).
	timeout, stall time.Duration
}

func (f *ociReadFlags) register(fs *pflag.FlagSet) {
	f.ociTargetFlags.register(fs)
	fs.StringVar(&f.username, "oci-username", "", "registry user (default $SNAPD_OCI_USERNAME; else ~/.docker/config.json; else anonymous)")
	fs.StringVar(&f.passwordFile, "oci-password-file", "", "file holding the registry password or token (mode 0600; default $SNAPD_OCI_PASSWORD)")
	fs.StringVar(&f.dockerConfig, "oci-docker-config", "", "Docker config.json with registry credentials (default $DOCKER_CONFIG/config.json or ~/.docker/config.json)")
	fs.DurationVar(&f.timeout, "oci-timeout", oci.DefaultResponseHeaderTimeout, "registry timeout for connecting, the TLS handshake and the wait for a response's headers")
	fs.DurationVar(&f.stall, "oci-stall-timeout", oci.DefaultStallTimeout, "registry stall timeout: a request or response body that moves less than 1 KiB/s over this much waiting fails the command (exit 2)")
}

// ociWriteFlags are ociReadFlags plus what only an upload uses.
type ociWriteFlags struct {
	ociReadFlags
	mountFrom string
	jobs      int
}

func (f *ociWriteFlags) register(fs *pflag.FlagSet) {
	f.ociReadFlags.register(fs)
	fs.StringVar(&f.mountFrom, "oci-mount-from", "", "another repository NAME of the same registry (e.g. the base model's) to mount existing blobs from instead of uploading them")
	fs.IntVar(&f.jobs, "oci-jobs", 4, "parallel blob uploads")
}

// ledgerFlags select the generations of a snapshot repository: --branch,
// --path and --tag-prefix, defaulting to gitops' defaults.
type ledgerFlags struct {
	branch, path, tagPrefix string
}

func (f *ledgerFlags) register(fs *pflag.FlagSet) {
	registerBranch(fs, &f.branch)
	registerPath(fs, &f.path)
	registerTagPrefix(fs, &f.tagPrefix)
}

// registerTagPrefix defines --tag-prefix alone, into p (clone reads no
// generation file, so it has no --path).
func registerTagPrefix(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "tag-prefix", gitops.DefaultTagPrefix, "generation tag prefix")
}

// registerPath defines --path alone, into p (the ranks commands).
func registerPath(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "path", gitops.DefaultPath, "directory holding the generation files")
}

// registerBranch defines --branch alone, into p (the ranks commands).
func registerBranch(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "branch", gitops.DefaultBranch, usageBranch)
}

// registerConfigBranch defines --branch for snapd run, which overrides
// its config's git.branch only when given (so it has no default here).
func registerConfigBranch(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "branch", "", usageBranch)
}

const usageBranch = "Git branch of the generations"

// trustFlags are the keys a verifying command trusts: --pubkey,
// --hmac-key, --require-signature and --allow-unsigned.
type trustFlags struct {
	pubkeys       []string
	hmacKey       string
	requireSig    bool
	allowUnsigned bool
}

func (f *trustFlags) register(fs *pflag.FlagSet) {
	registerPubkeys(fs, &f.pubkeys)
	fs.StringVar(&f.hmacKey, "hmac-key", "", "HMAC key file: check every array's HMAC")
	fs.BoolVar(&f.requireSig, "require-signature", false, "treat a snapshot not signed by a trusted --pubkey as failed")
	fs.BoolVar(&f.allowUnsigned, "allow-unsigned", false, "with --pubkey: accept an unsigned snapshot (giving --pubkey otherwise requires a signature; one that is present is still checked)")
}

// registerPubkeys defines --pubkey alone (verify-repo checks signatures
// but no HMAC).
func registerPubkeys(fs *pflag.FlagSet, p *[]string) {
	fs.StringArrayVar(p, "pubkey", nil, "trusted signer: ssh-ed25519 .pub file or allowed_signers file (repeatable)")
}
