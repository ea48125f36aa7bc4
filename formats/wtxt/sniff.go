package wtxt

import "bytes"

// The WTXT family's sub-formats that are not codecs of the formats
// registry (a codec's Sniff recognises a WTXT file, IsDelta a DELTA v2)
// are recognised here, by their magic, from the first bytes of a file
// (formats.SniffLen are enough).

// IsWSUM reports whether head starts like a WSUM file (its magic word and
// a space; ParseWSUM checks the rest, the version first).
func IsWSUM(head []byte) bool { return bytes.HasPrefix(head, []byte("WSUM ")) }

// IsSkeleton reports whether head starts with a skeleton's first line
// (SkeletonMagic and LF).
func IsSkeleton(head []byte) bool { return bytes.HasPrefix(head, []byte(SkeletonMagic+"\n")) }
