// Package oci is the registry client of the skeleton layout
// (gitops/layout): it stores the tensor bytes of WTXT generations in an
// OCI registry while Git keeps the skeleton (formats/wtxt,
// Split/Assemble), and serves them as a layout.Blobs
// (Repository.Blobs).
//
// Layout of one generation in repository HOST[:PORT]/NAME:
//
//	blobs      one per distinct segment: the raw bytes of consecutive chunks
//	           of one array (wtxt.Split; 4 MiB, or AutoSegmentSize), digest
//	           sha256:<hex of SHA-256 of the bytes>, media type
//	           SegmentMediaType
//	config     a JSON blob (ConfigMediaType, see Config) listing every
//	           segment in file order: array, first chunk, chunk count,
//	           size, digest
//	manifest   an OCI image manifest (schemaVersion 2, mediaType
//	           application/vnd.oci.image.manifest.v1+json) with
//	           artifactType ArtifactType, the config, one layer per
//	           distinct segment digest (first appearance order; titled
//	           "sha256-<hex>.seg" so `oras pull` writes one file per blob),
//	           and annotations snapd.gen, snapd.ts, snapd.merkle_this,
//	           snapd.sha256_all, snapd.keyid and
//	           org.opencontainers.image.created (= the generation's ts, so
//	           the manifest bytes are a function of the WTXT alone)
//	tag        gen-NNNNNN (the WTXT gen, DEC6)
//
// Push order: every missing segment (HEAD first, upload only what the
// registry lacks, bounded parallelism), then the config, then the manifest
// by tag. A manifest is therefore never visible before all its blobs.
// PushWTXTAt (`snapd oci push --prev-skeleton`, the daemon's queue when
// the build could not push) and PushSnapshotFile also take the
// previous generation's segments by key (wtxt.SkeletonKeys): a segment
// whose ch lines are a previous segment's, and which the previous
// generation's manifest and config (one GET each, asked while the split
// runs) list at the same place with that size and digest, is not read or
// decoded again; its digest is reused. A previous skeleton is evidence,
// not truth: a segment the registry does not confirm is read and checked.
// PushSnapshot (`snapd oci push CHECKPOINT`) cuts the same skeleton and
// segments straight from a snapshot's arrays, without a WTXT;
// PushSnapshotFile wraps it with the skeleton file, the automatic segment
// size and the segment cache file that push keeps between generations.
//
// Retention: GC deletes the manifests of all but the newest generations;
// the registry's own garbage collection then frees the blobs only they
// referenced. A generation whose manifest answers 404 is what retention
// leaves (ErrManifestNotFound, Collected); ExplainMissing turns an
// assembly that stopped at a missing blob of such a generation into a
// *CollectedError ("content collected"), never a blob missing under a
// manifest that is still there.
//
// Transport: HTTPS, or plain HTTP only for loopback hosts (localhost,
// 127.0.0.0/8, ::1) or with Options.Insecure. Credentials come from
// Options (user + password or token, e.g. from SNAPD_OCI_USERNAME /
// SNAPD_OCI_PASSWORD or a password file) or the Docker config
// (~/.docker/config.json or $DOCKER_CONFIG, including credsStore and
// credHelpers). oras-go's auth client runs the Docker token flow
// (WWW-Authenticate: Bearer realm=...) and basic auth. GHCR: user name +
// a personal access token (read:packages / write:packages) as password.
// No credential or token is ever logged or put in an error. Every request
// is bounded (Timeouts: connect, TLS handshake, response headers, and a
// stall timeout on bodies); one that runs out fails with ErrStalled.
//
// A node of a sharded job (ranks.go) pushes its rank part the same way,
// as the manifest tagged gen-NNNNNN.rank-R (RankTag; artifactType
// RankArtifactType, the rank's skeleton as its last layer, annotations
// snapd.rank, snapd.world_size, snapd.chain, snapd.skeleton):
// PushRankPart uploads it, FetchRankPart reads and checks it for the
// committer, GCRanks deletes the rank manifests of old committed
// generations (docs/FORMAT.md section 7).
package oci
