package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/keys"
)

type keygenOptions struct {
	dir       string
	principal string
}

func newKeygenCommand(e *env) *cobra.Command {
	var o keygenOptions
	cmd := &cobra.Command{
		Use:   "keygen DIR",
		Short: "Generate a signing key, an HMAC key and an age key pair into DIR",
		Long: `Create DIR (mode 0700) if needed and write a fresh key set into it:

  sign_ed25519      OpenSSH Ed25519 private key (0600) for --sign-key
  sign_ed25519.pub  its public key, for verify --trusted / allowed_signers
  hmac.key          64 hex digits (0600) for --hmac-key
  age.key           age identity (0600) for decrypt --identity
  age.pub           age recipient for --encrypt-to
  allowed_signers   PRINCIPAL namespaces="git,file" ssh-ed25519 ... : for git
                    verify-commit/verify-tag (gpg.ssh.allowedSignersFile),
                    ssh-keygen -Y verify and snapd verify --pubkey

The files are standard: ssh-keygen -y -f DIR/sign_ed25519 and
age-keygen -y DIR/age.key print the public halves. Nothing is overwritten:
if any of the five files exists, keygen writes none of them.
Prints the written paths and the key id that signed snapshots will carry.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.dir = args[0]
			return runKeygen(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.principal, "principal", "", usagePrincipal)
	return cmd
}

func runKeygen(_ context.Context, e *env, o *keygenOptions) error {
	principal := o.principal
	if principal == "" {
		principal = defaultPrincipal()
	} else if err := checkPrincipal("--principal", principal); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(o.dir, sshsig.AllowedSignersFile)); err == nil {
		return withHint(ioError{fmt.Errorf("%s: %w; refusing to overwrite a key file (move it away or pick another directory)", filepath.Join(o.dir, sshsig.AllowedSignersFile), fs.ErrExist)}, "snapd keygen never overwrites keys: choose an empty or new directory")
	}
	g, err := keys.Generate(o.dir)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return withHint(ioError{err}, "snapd keygen never overwrites keys: choose an empty or new directory")
		}
		return ioError{err}
	}
	for _, f := range []struct{ path, what string }{
		{g.SignKey, "Ed25519 signing key (secret)"},
		{g.SignPub, "Ed25519 public key"},
		{g.HMACKey, "HMAC key (secret)"},
		{g.AgeKey, "age identity (secret)"},
		{g.AgePub, "age recipient"},
	} {
		if _, err := fmt.Fprintf(e.stdout, "wrote %s\t%s\n", f.path, f.what); err != nil {
			return ioError{err}
		}
	}
	as, err := sshsig.WriteAllowedSigners(o.dir, principal, g.PublicKey)
	if err != nil {
		return ioError{err}
	}
	for _, f := range []struct{ path, what string }{
		{as, "allowed_signers (principal " + principal + ")"},
	} {
		if _, err := fmt.Fprintf(e.stdout, "wrote %s\t%s\n", f.path, f.what); err != nil {
			return ioError{err}
		}
	}
	if _, err := fmt.Fprintf(e.stdout, "keyid %s\nage recipient %s\n", keys.KeyID(g.PublicKey), g.AgeRecipient); err != nil {
		return ioError{err}
	}
	return nil
}
