// Package ranks builds one signed, chained generation from the W shards of
// a sharded training job: each rank's daemon converts its shard
// to an ordinary WTXT "rank part" and pushes it to the OCI registry as a
// rank manifest tagged gen-NNNNNN.rank-R; one committer, once all W rank
// manifests of generation N are present and valid, writes the generation
// index (the file this package encodes, parses and verifies) and the W rank
// skeletons into ONE signed Git commit.
//
// The exact construction is docs/FORMAT.md section 7. In short:
//
//	chain id     = SHA-256("snapd-ranks-chain/1\n" || job)       (ChainID)
//	rank part R  = WTXT of rank R's shard, meta gen = N, merkle_prev = chain id
//	root text    = "snapd-ranks/1 gen=<DEC6> world_size=<W>\n"
//	               then per rank r = 0..W-1, in rank order:
//	               "rank=<r> sha256_all=<hex64> merkle_this=<hex64>\n"
//	sha256_all   = SHA-256(root text)                             (Root)
//	ts           = the latest ts of the W rank parts
//	merkle_this  = SHA-256(merkle_prev || sha256_all || ts || gen || build)
//	               (the WTXT formula; merkle_prev = merkle_this of the
//	               previous committed generation of the ledger, zeros first)
//
// The index file (Encode/Parse):
//
//	WTXT-RANKS 1
//	gen gen=<DEC6> world_size=<W> ts=<TS> build=<TOK> chain=<hex64>
//	rank rank=<R> sha256_all=<hex64> merkle_this=<hex64> keyid=<hex16|-> skeleton=<NAME> skeleton_sha256=<hex64> manifest=sha256:<hex64>
//	... W rank lines, rank 0 first ...
//	root sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64>
//	sign ed25519=<base64, 88 chars> keyid=<hex16>     (optional)
//	endranks
//
// The signature is Ed25519 over every byte before the sign line (as in
// WTXT). Parsing is strict and canonical (what parses re-encodes to the same
// bytes); every error is an *Error naming the file, line, rank and check.
package ranks
