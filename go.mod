module github.com/snapd-ml/snapd

go 1.26.8

require golang.org/x/sys v0.49.0

require (
	github.com/klauspost/cpuid/v2 v2.0.9 // indirect
	lukechampine.com/blake3 v1.4.1 // indirect
)
