// Package ranks is the WTXT-RANKS codec: the generation index of a
// multi-rank (sharded) training job, and the rank parts it names.
//
// Each rank of a job of world size W converts its shard to an ordinary
// WTXT, the rank part (EncodePart), whose meta gen is the generation N and
// whose merkle_prev is the job's chain id. One committer, once all W rank
// parts of generation N are in, writes the generation index (New, Encode)
// beside the W rank skeletons in one signed Git commit (gitops). This
// package knows nothing of Git or registries: it encodes, decodes and
// verifies the index, and checks a rank skeleton against it.
//
// The construction is docs/FORMAT.md section 7:
//
//	chain id     = SHA-256("snapd-ranks-chain/1\n" || job)       (ChainID)
//	rank part R  = WTXT of rank R's shard, meta gen = N, merkle_prev = chain id
//	root text    = "snapd-ranks/1 gen=<DEC6> world_size=<W>\n"
//	               then per rank r = 0..W-1, in rank order:
//	               "rank=<r> sha256_all=<hex64> merkle_this=<hex64>\n"
//	sha256_all   = SHA-256(root text)                             (RootText)
//	ts           = the latest ts of the W rank parts
//	merkle_this  = SHA-256(merkle_prev || sha256_all || ts || gen || build)
//	               (the WTXT formula; merkle_prev = merkle_this of the
//	               previous committed generation of the ledger, zeros first)
//
// # Byte layout
//
// An index is printable ASCII (0x20..0x7e) in LF-terminated lines, at most
// MaxIndexBytes, with W in 1..MaxWorldSize:
//
//	WTXT-RANKS 1                                          magic (IndexMagic)
//	gen gen=<DEC6> world_size=<W> ts=<TS> build=<TOK> chain=<hex64>
//	rank rank=<R> sha256_all=<hex64> merkle_this=<hex64> keyid=<hex16|-> skeleton=<NAME> skeleton_sha256=<hex64> manifest=sha256:<hex64>
//	...                                                   W rank lines, rank 0 first, each rank once
//	root sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64>
//	sign ed25519=<base64, 88 chars> keyid=<hex16>         optional
//	endranks
//
// Every line has exactly the keys shown, in that order, separated by one
// space; values are non-empty. DEC6 is a decimal of at least six digits,
// zero-padded to six (1..10^18-1); TS is YYYY-MM-DDTHH:MM:SSZ; TOK is a
// WTXT token (wtxt.IsToken); hex is lower case; NAME is 1..255 bytes of
// A-Z a-z 0-9 . _ - (not "." or ".."). The signature is Ed25519 over every
// byte before the sign line, as in WTXT; keyid is keys.KeyID of the
// signing key.
//
// # Decoding
//
// Decode checks the size before it reads anything, Parse checks the
// grammar, that world_size matches the number of rank lines before it
// allocates a rank table, the rank order, that sha256_all and merkle_this
// follow from the lines above them, and that the bytes are canonical (what
// parses re-encodes to the same bytes; FuzzParse). Signature, trusted keys
// and the chain across generations are Verify's. Every error is a
// *wtxt.Error whose Check is one of this package's namespaced checks
// ("ranks/..."), naming the file, the line and the rank; it never quotes
// the file's bytes.
package ranks
