// Package ranks builds one signed, chained generation from the W shards of
// a sharded training job: each rank's daemon converts its shard
// to an ordinary WTXT "rank part" and pushes it to the OCI registry as a
// rank manifest tagged gen-NNNNNN.rank-R; one committer, once all W rank
// manifests of generation N are present and valid, writes the generation
// index (formats/wtxt/ranks) and the W rank
// skeletons into ONE signed Git commit.
//
// The generation index and the rank part are the WTXT-RANKS codec,
// formats/wtxt/ranks (docs/FORMAT.md section 7); this package stores rank
// parts in the registry, commits generations to the Git ledger and
// verifies the ledger.
package ranks
