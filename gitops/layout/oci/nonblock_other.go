//go:build !unix

package oci

const nonBlock = 0
