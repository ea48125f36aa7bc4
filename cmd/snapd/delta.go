package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
)

func newDeltaCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delta",
		Short: "Make and apply DELTA v2 files (only the changed chunks between two WTXT generations)",
	}
	// The delta commands read only their arguments: the root's global
	// flags (--state-dir, --config, --quiet) are not listed.
	cmd.SetUsageTemplate(withoutGlobalFlags((&cobra.Command{}).UsageTemplate()))
	cmd.AddCommand(newDeltaMakeCommand(e), newDeltaApplyCommand(e))
	return cmd
}

// globalFlagsBlock is the "Global Flags" section of cobra's usage template.
const globalFlagsBlock = `{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}`

// withoutGlobalFlags is a usage template without its Global Flags section.
func withoutGlobalFlags(tmpl string) string { return strings.Replace(tmpl, globalFlagsBlock, "", 1) }

// wsumFor returns the WSUM of the WTXT file path whose bytes are b: the
// file named by flag when given; else, when the file is streamed
// (root_pending), its sibling — path without ".wtxt", plus ".wsum", as
// snapd verify finds it — if present; else nil. A header that does not
// parse yields nil: the verification reports it.
func wsumFor(path string, b []byte, flag string) ([]byte, error) {
	if flag == "" {
		h, err := wtxt.ReadHeader(bytes.NewReader(b))
		if err != nil || !h.Pending {
			return nil, nil
		}
		cand := strings.TrimSuffix(path, ".wtxt") + ".wsum"
		if _, err := os.Stat(cand); err != nil {
			return nil, nil
		}
		flag = cand
	}
	w, err := readLimited(flag, 4096)
	if err != nil {
		return nil, ioError{err}
	}
	return w, nil
}

// needWSUMHint adds the way to give a streamed input's WSUM.
func needWSUMHint(err error, flags string) error {
	if errors.Is(err, wtxt.ErrNeedWSUM) {
		return withHint(err, "give the streamed file's WSUM with "+flags+", or put it beside the file (X.wtxt -> X.wsum)")
	}
	return err
}

type deltaMakeOptions struct {
	base, target, out string
	encryptTo         string
	signKey           string
	baseWSUM, wsum    string
}

func newDeltaMakeCommand(e *env) *cobra.Command {
	var o deltaMakeOptions
	cmd := &cobra.Command{
		Use:   "make BASE.wtxt TARGET.wtxt OUT.wtxtdelta",
		Short: "Write the delta that turns BASE into TARGET",
		Long: `Write a DELTA v2: the target's header and arr lines and only the chunks
whose bytes differ from the base chunk with the same ix (all chunks of arrays
that are new or changed in dtype, shape or geometry). Both inputs are fully
verified (without keys) first; a streamed input (root_pending) is verified
jointly with its WSUM — --base-wsum for BASE, --wsum for TARGET, else the
file beside it (X.wtxt -> X.wsum) — and refused without one. With
--encrypt-to the delta is wrapped in age armor and OUT.wseal is written
beside it (signed with --sign-key).`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.base, o.target, o.out = args[0], args[1], args[2]
			if o.signKey != "" && o.encryptTo == "" {
				return usageError{errors.New("--sign-key signs the seal of an encrypted delta: it needs --encrypt-to")}
			}
			return runDeltaMake(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.encryptTo, "encrypt-to", "", usageEncryptTo)
	cmd.Flags().StringVar(&o.signKey, "sign-key", "", usageSignKey)
	cmd.Flags().StringVar(&o.baseWSUM, "base-wsum", "", "WSUM of a streamed BASE (default: BASE with .wsum if present)")
	cmd.Flags().StringVar(&o.wsum, "wsum", "", "WSUM of a streamed TARGET (default: TARGET with .wsum if present)")
	return cmd
}

func runDeltaMake(ctx context.Context, e *env, o *deltaMakeOptions) error {
	base, err := snapshot.MapFile(o.base)
	if err != nil {
		return ioError{err}
	}
	defer base.Close()
	target, err := snapshot.MapFile(o.target)
	if err != nil {
		return ioError{err}
	}
	defer target.Close()
	dopts := wtxt.DeltaOptions{RequireWSUM: true}
	if dopts.BaseWSUM, err = wsumFor(o.base, base.Bytes(), o.baseWSUM); err != nil {
		return err
	}
	if dopts.TargetWSUM, err = wsumFor(o.target, target.Bytes(), o.wsum); err != nil {
		return err
	}
	var recipients []age.Recipient
	if o.encryptTo != "" {
		if recipients, err = keys.LoadAgeRecipients(o.encryptTo); err != nil {
			return keyError(err)
		}
	}
	var info *wtxt.DeltaInfo
	err = writeAtomic(o.out, func(f *os.File) error {
		produce := func(w io.Writer) (err error) {
			info, err = wtxt.MakeDeltaWith(ctx, w, base, base.Size(), target, target.Size(), dopts)
			return err
		}
		if recipients == nil {
			return produce(f)
		}
		return encryptStream(f, recipients, produce)
	})
	if err != nil {
		return needWSUMHint(err, "--base-wsum/--wsum")
	}
	if recipients != nil {
		h, err := wtxt.ReadHeader(bytes.NewReader(target.Bytes()))
		if err != nil {
			return err
		}
		var tw *wtxt.WSUM // a streamed target's root values (verified above)
		if dopts.TargetWSUM != nil {
			if tw, err = wtxt.ParseWSUM(dopts.TargetWSUM); err != nil {
				return err
			}
		}
		var sk []byte
		if o.signKey != "" {
			k, err := keys.LoadSigner(o.signKey)
			if err != nil {
				return keyError(err)
			}
			sk = k
		}
		if err := sealFor(o.out, armor.KindDelta, h, tw, sk); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "%s: %d of %d chunks changed in %d arrays", o.out, info.Changed, info.Chunks, info.Arrays)
	if len(info.Added) > 0 {
		fmt.Fprintf(e.stdout, "; new or re-shaped: %v", info.Added)
	}
	if len(info.Removed) > 0 {
		fmt.Fprintf(e.stdout, "; removed: %v", info.Removed)
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// encryptStream runs produce into an age-armored stream written to f
// (armor.NewWriter: no pipe, no goroutine). produce's error wins.
func encryptStream(f io.Writer, recipients []age.Recipient, produce func(io.Writer) error) error {
	w, err := armor.NewWriter(f, recipients...)
	if err != nil {
		return err
	}
	if err := produce(w); err != nil {
		return err
	}
	return w.Close()
}

type deltaApplyOptions struct {
	base, delta, out string
	identity         string
	wsum             string
	baseWSUM         string
}

func newDeltaApplyCommand(e *env) *cobra.Command {
	var o deltaApplyOptions
	cmd := &cobra.Command{
		Use:   "apply BASE.wtxt DELTA OUT.wtxt",
		Short: "Rebuild the target WTXT from its base and a delta",
		Long: `Apply DELTA to BASE. BASE is verified and its computed sha256_all must be
the delta's base_sha256_all. The result is the target byte for byte
(signature included); it is verified before it is renamed into place, so a
failed apply leaves nothing at OUT. A streamed target (root_pending) is
checked for everything the WTXT alone proves (structure, every chunk and
array hash); the checks only its WSUM can settle (sha256_all, merkle,
chain, signature) are run with --wsum, else named as deferred in the
output (run snapd verify OUT --wsum W later). A streamed BASE is verified
jointly with its WSUM when one is at hand (--base-wsum, else BASE with .wsum
beside it). The seed's short form (arr name=R blocks only) is accepted: its
arrays are re-hashed and reported unauthenticated, and the result keeps the
base's meta and merkle_prev — for a streamed BASE taken from its WSUM, which
is then required (without it the result would start a new chain).
Armored (encrypted) inputs are decrypted with --identity.`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.base, o.delta, o.out = args[0], args[1], args[2]
			return runDeltaApply(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.identity, "identity", "", usageIdentity)
	cmd.Flags().StringVar(&o.wsum, "wsum", "", "WSUM of a streamed target: verify the result completely")
	cmd.Flags().StringVar(&o.baseWSUM, "base-wsum", "", "WSUM of a streamed BASE (default: BASE with .wsum if present)")
	return cmd
}

// openPlain maps path, decrypting it to a temp file first when armored.
func openPlain(path, identity string) (*snapshot.Mapping, func(), error) {
	h, err := readHead(path, 64)
	if err != nil {
		return nil, nil, ioError{err}
	}
	if !armor.IsArmored(h) {
		m, err := snapshot.MapFile(path)
		if err != nil {
			return nil, nil, ioError{err}
		}
		return m, func() { m.Close() }, nil
	}
	if identity == "" {
		return nil, nil, withHint(fmt.Errorf("%s is age-encrypted", path), "pass --identity FILE")
	}
	ids, err := keys.LoadAgeIdentities(identity)
	if err != nil {
		return nil, nil, keyError(err)
	}
	in, err := os.Open(path)
	if err != nil {
		return nil, nil, ioError{err}
	}
	defer in.Close()
	r, err := armor.Decrypt(in, ids...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp("", "snapd-plain-*")
	if err != nil {
		return nil, nil, ioError{err}
	}
	tmp.Chmod(0o600)
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, nil, fmt.Errorf("%s: decrypt: %w", path, err)
	}
	m, err := snapshot.MapFile(tmp.Name())
	if err != nil {
		os.Remove(tmp.Name())
		return nil, nil, ioError{err}
	}
	return m, func() { m.Close(); os.Remove(tmp.Name()) }, nil
}

func runDeltaApply(ctx context.Context, e *env, o *deltaApplyOptions) error {
	base, closeBase, err := openPlain(o.base, o.identity)
	if err != nil {
		return err
	}
	defer closeBase()
	delta, closeDelta, err := openPlain(o.delta, o.identity)
	if err != nil {
		return err
	}
	defer closeDelta()
	var aopts wtxt.ApplyOptions
	if aopts.BaseWSUM, err = wsumFor(o.base, base.Bytes(), o.baseWSUM); err != nil {
		return err
	}
	vopts := wtxt.VerifyOptions{File: o.out, DeferWSUM: true}
	if o.wsum != "" {
		if vopts.WSUM, err = readLimited(o.wsum, 4096); err != nil {
			return ioError{err}
		}
	}
	var info *wtxt.DeltaInfo
	var rep *wtxt.Report
	err = writeAtomic(o.out, func(f *os.File) error {
		var err error
		info, err = wtxt.ApplyDeltaWith(ctx, f, base, base.Size(), bytes.NewReader(delta.Bytes()), o.delta, aopts)
		if err != nil {
			return needWSUMHint(err, "--base-wsum")
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		// Every check the result can pass without its WSUM runs; a
		// streamed target's WSUM-dependent checks are deferred and
		// named (never silently skipped).
		if rep, err = wtxt.Verify(ctx, f, vopts); err != nil {
			return fmt.Errorf("result does not verify: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: applied %d changed chunks (%d chunks in %d arrays)\n", o.out, info.Changed, info.Chunks, info.Arrays)
	if len(rep.Deferred) > 0 {
		fmt.Fprintf(e.stdout, "streamed target: checks deferred until its WSUM is at hand: %s (run: snapd verify %s --wsum WSUM)\n", checksText(rep.Deferred), o.out)
	}
	if len(info.Short) > 0 {
		fmt.Fprintf(e.stdout, "short-form arrays re-hashed; their HMAC is the base's and does not authenticate them: %v\n", info.Short)
	}
	return nil
}

// sealFor writes path.wseal for an armored file whose generation has the
// header h (wsum supplies the final values of a streamed snapshot).
func sealFor(path, kind string, h *wtxt.Header, wsum *wtxt.WSUM, signKey []byte) error {
	v := armor.Seal{Kind: kind, Root: h.Complete(wsum)}
	if _, err := armor.WriteSeal(path, v, signKey, 0o644); err != nil {
		return err
	}
	return nil
}
