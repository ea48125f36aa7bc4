package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/progress"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
)

// wtxtFlags are the WTXT writer options shared by convert and the demo.
type wtxtFlags struct {
	schema, build, host, cuda string
	gen                       uint64
	ts                        string
	signKey, hmacKey          string
	prevMerkle, prev          string
	rowsPerChunk              int
	stream                    string
	encryptTo                 string
	meter                     *progress.Meter // counts the WTXT written (nil: none)
}

func (f *wtxtFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.schema, "schema", "weights/v1", "WTXT meta schema")
	fl.Uint64Var(&f.gen, "gen", 1, "generation number (written zero-padded to 6 digits)")
	fl.StringVar(&f.ts, "ts", "", "timestamp YYYY-MM-DDTHH:MM:SSZ (default: SOURCE_DATE_EPOCH, else now)")
	fl.StringVar(&f.build, "build", "unknown", usageBuild)
	fl.StringVar(&f.host, "host", "cpu", "host token")
	fl.StringVar(&f.cuda, "cuda", "off", "cuda token")
	fl.StringVar(&f.signKey, "sign-key", "", usageSignKey)
	fl.StringVar(&f.hmacKey, "hmac-key", "", usageHMACKeyOut)
	fl.StringVar(&f.prevMerkle, "prev-merkle", "", "merkle_this of the previous generation (64 hex)")
	fl.StringVar(&f.prev, "prev", "", "previous generation's WTXT, WSUM or skeleton file; its merkle_this chains to this one")
	fl.IntVar(&f.rowsPerChunk, "rows-per-chunk", 0, usageRows)
	fl.StringVar(&f.stream, "stream", "", "streaming mode: write root_pending and the WSUM finalization to this file")
	fl.StringVar(&f.encryptTo, "encrypt-to", "", usageEncryptTo)
}

// options turns the flags into writer options and meta.
func (f *wtxtFlags) options(e *env) (snapshot.Meta, wtxt.EncodeOptions, error) {
	var opts wtxt.EncodeOptions
	m := snapshot.Meta{Schema: f.schema, Gen: f.gen, Build: f.build, Host: f.host, Cuda: f.cuda}
	if f.ts != "" {
		t, err := time.Parse("2006-01-02T15:04:05Z", f.ts)
		if err != nil {
			return m, opts, usageError{fmt.Errorf("--ts %q: want YYYY-MM-DDTHH:MM:SSZ", f.ts)}
		}
		m.TS = t
	} else {
		t, err := wtxt.DefaultTS(e.getenv, e.now)
		if err != nil {
			return m, opts, usageError{err}
		}
		m.TS = t
	}
	if f.rowsPerChunk < 0 {
		return m, opts, usageError{fmt.Errorf("--rows-per-chunk %d: must be >= 0", f.rowsPerChunk)}
	}
	opts.RowsPerChunk = f.rowsPerChunk
	if f.signKey != "" {
		k, err := keys.LoadSigner(f.signKey)
		if err != nil {
			return m, opts, keyError(err)
		}
		opts.SignKey = k
	}
	if f.hmacKey != "" {
		k, err := keys.LoadHMACKey(f.hmacKey)
		if err != nil {
			return m, opts, keyError(err)
		}
		opts.HMACKey = k
	}
	if f.prevMerkle != "" && f.prev != "" {
		return m, opts, usageError{errors.New("--prev-merkle and --prev are exclusive")}
	}
	if f.prevMerkle != "" {
		b, err := hex.DecodeString(f.prevMerkle)
		if err != nil || len(b) != 32 || strings.ToLower(f.prevMerkle) != f.prevMerkle {
			return m, opts, usageError{fmt.Errorf("--prev-merkle: want 64 lowercase hex digits")}
		}
		copy(opts.PrevMerkle[:], b)
	}
	if f.prev != "" {
		pm, err := prevMerkleFromFile(f.prev)
		if err != nil {
			return m, opts, err
		}
		opts.PrevMerkle = pm
	}
	opts.Stream = f.stream != ""
	return m, opts, nil
}

func keyError(err error) error {
	if errors.Is(err, keys.ErrPermissions) {
		return usageError{err}
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return ioError{err}
	}
	return err
}

type convertOptions struct {
	in, out   string
	from, to  string
	lossy     bool
	strict    bool
	wsum      string
	shardSize string
	w         wtxtFlags
}

func newConvertCommand(e *env) *cobra.Command {
	var o convertOptions
	cmd := &cobra.Command{
		Use:   "convert IN OUT",
		Short: "Convert a checkpoint between formats (to and from WTXT)",
		Long: `Convert IN to OUT. Formats are detected from magic bytes (IN) and file
extensions (OUT); --from and --to override. Converting to WTXT writes a
deterministic snapshot: same input and options give the same bytes.

IN may be a checkpoint directory: a Hugging Face sharded checkpoint
(model.safetensors.index.json + shards) or a plain directory of checkpoint
files, read as one snapshot. OUT is written as such a directory when it ends
in '/', is an existing (empty) directory, or --shard-size is given: the
recorded layout is reproduced, else shards of --shard-size (default 5GB) in
safetensors (--to another format) with a model.safetensors.index.json.

Known formats: ` + strings.Join(newRegistry().Names(), ", ") + `.`,
		Example: `  snapd convert model.safetensors gen1.wtxt --gen 1 --sign-key keys/sign_ed25519 --hmac-key keys/hmac.key
  snapd convert model2.safetensors gen2.wtxt --gen 2 --prev gen1.wtxt --sign-key keys/sign_ed25519
  snapd convert gen2.wtxt restored.safetensors
  snapd convert llama-dir/ gen3.wtxt --gen 3
  snapd convert gen3.wtxt restored-dir/ --shard-size 2GB`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.in, o.out = args[0], args[1]
			return runConvert(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.from, "from", "", usageFrom)
	cmd.Flags().StringVar(&o.to, "to", "", usageTo)
	cmd.Flags().BoolVar(&o.lossy, "lossy", false, usageLossy)
	cmd.Flags().BoolVar(&o.strict, "strict", false, "refuse a checkpoint whose pickle names globals outside the allowlist instead of carrying its bytes verbatim")
	cmd.Flags().StringVar(&o.wsum, "wsum", "", usageWSUMIn)
	cmd.Flags().StringVar(&o.shardSize, "shard-size", "", "write OUT as a sharded directory (HF index + shards of at most this size, e.g. 2GB, 500MiB); a directory OUT without it reproduces the recorded layout (default 5GB)")
	o.w.register(cmd)
	return cmd
}

func runConvert(ctx context.Context, e *env, o *convertOptions) error {
	reg := newRegistry()
	var src *openedSnapshot
	var err error
	if isDir(o.in) {
		src, err = openDirStrict(ctx, reg, o.in, o.from, e.logger, o.strict)
	} else {
		src, err = openSnapshotStrict(ctx, reg, o.in, o.from, o.strict)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if src.Codec.Name() == "wtxt" {
		if err := verifyStreamedInput(ctx, o.in, o.wsum, src.m); err != nil {
			return err
		}
	}
	if wantsDirOutput(o) {
		return convertToDir(ctx, reg, src.Snapshot, o, func(l formats.Loss) { fmt.Fprintf(e.stderr, "snapd: lossy: %s\n", l) })
	}

	var target formats.Codec
	if o.to != "" {
		target, err = reg.ByName(o.to)
	} else {
		target, err = reg.ByExtension(strings.TrimSuffix(o.out, ".age"))
	}
	if err != nil {
		return usageError{fmt.Errorf("%w (use --to)", err)}
	}
	if target.Name() != "wtxt" {
		if o.w.encryptTo != "" || o.w.stream != "" {
			return usageError{errors.New("--encrypt-to and --stream apply to WTXT output only")}
		}
		m := e.meter(filepath.Base(o.out), rawBytes(src.Snapshot))
		err := writeAtomic(o.out, func(f *os.File) error {
			return target.Encode(ctx, m.Wrap(f), src.Snapshot, formats.EncodeOptions{Lossy: o.lossy, Lost: func(l formats.Loss) {
				m.Clear()
				fmt.Fprintf(e.stderr, "snapd: lossy: %s\n", l)
			}})
		})
		return endMeter(m, err)
	}
	meta, opts, err := o.w.options(e)
	if err != nil {
		return err
	}
	s := src.Snapshot
	s.Meta = meta
	o.w.meter = e.meter(filepath.Base(o.out), progress.WTXTEstimate(rawBytes(s)))
	_, err = writeWTXT(ctx, e, s, opts, o.out, &o.w)
	return endMeter(o.w.meter, err)
}

// rawBytes is the sum of the arrays' sizes (0 when one overflows).
func rawBytes(s *snapshot.Snapshot) int64 {
	var n int64
	for _, a := range s.Arrays {
		b, err := a.NumBytes()
		if err != nil || n+b < n {
			return 0
		}
		n += b
	}
	return n
}

// endMeter finishes the progress line on success and erases it before an
// error is printed; it returns err.
func endMeter(m *progress.Meter, err error) error {
	if err != nil {
		m.Clear()
	} else {
		m.Finish()
	}
	return err
}

// verifyStreamedInput verifies a streamed WTXT input (root_pending) with
// its WSUM before it is converted: decoding alone checks every chunk and
// array hash but not the root values, which only the WSUM holds, so a
// renamed array or a dropped one would convert silently. The WSUM is
// --wsum or the file beside IN (as `snapd verify` finds it); without one
// the input is refused. Other WTXT inputs were fully checked (every check
// that needs no key) by decoding.
func verifyStreamedInput(ctx context.Context, path, wsum string, m *snapshot.Mapping) error {
	h, err := wtxt.ReadHeader(io.NewSectionReader(m, 0, m.Size()))
	if err != nil || !h.Pending {
		return nil // decoding accepted the header: not streamed
	}
	vo := &verifyOptions{file: path, wsum: wsum}
	opts := wtxt.VerifyOptions{File: path}
	if err := loadWSUM(vo, &opts); err != nil {
		return err
	}
	if opts.WSUM == nil {
		return withHint(fmt.Errorf("%s: streamed WTXT (root_pending): its WSUM is needed to verify it before converting", path),
			"put the WSUM beside it as "+strings.TrimSuffix(path, ".wtxt")+".wsum or pass --wsum FILE")
	}
	if _, err := wtxt.Verify(ctx, io.NewSectionReader(m, 0, m.Size()), opts); err != nil {
		var we *wtxt.Error
		if errors.As(err, &we) {
			return fmt.Errorf("refusing to convert: %w", err)
		}
		return ioError{err}
	}
	return nil
}

// writeAtomic writes path through a temp file renamed into place only when
// fill succeeds, so a failed conversion leaves nothing at path.
func writeAtomic(path string, fill func(f *os.File) error) error {
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return ioError{err}
	}
	defer f.Abort()
	if err := fill(f.File); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := f.Commit(); err != nil {
		return ioError{err}
	}
	return nil
}
