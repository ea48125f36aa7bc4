package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/keys"
)

type decryptOptions struct {
	in, out, identity string
}

func newDecryptCommand(e *env) *cobra.Command {
	var o decryptOptions
	cmd := &cobra.Command{
		Use:   "decrypt IN OUT --identity FILE",
		Short: "Decrypt an age-armored snapshot, delta or WSUM (as age -d does)",
		Long: `Decrypt IN (age ASCII armor, written by snapd or by age -a) with the
identities in --identity (age-keygen or OpenSSH ed25519 files) and write the
plaintext to OUT atomically: a wrong key, bad armor or tampered ciphertext
leaves nothing at OUT.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.in, o.out = args[0], args[1]
			return runDecrypt(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.identity, "identity", "", usageIdentity)
	cmd.MarkFlagRequired("identity")
	return cmd
}

func runDecrypt(ctx context.Context, e *env, o *decryptOptions) error {
	ids, err := keys.LoadAgeIdentities(o.identity)
	if err != nil {
		return keyError(err)
	}
	in, err := os.Open(o.in)
	if err != nil {
		return ioError{err}
	}
	defer in.Close()
	r, err := armor.Decrypt(in, ids...)
	if err != nil {
		return fmt.Errorf("%s: %w", o.in, err)
	}
	var n int64
	if err := writeAtomic(o.out, func(f *os.File) error {
		n, err = io.Copy(f, r)
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: %d bytes decrypted\n", o.out, n)
	return nil
}
