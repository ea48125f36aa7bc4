package main

import (
	"log/slog"
	"time"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
)

// applyRunOCIFlags applies snapd run's --oci-repository and --oci-insecure
// to store.oci.
func applyRunOCIFlags(c *configs.Config, o *ociTargetFlags, set func(string, func())) {
	set("oci-repository", func() { c.Store.OCI.Repository = o.repository })
	set("oci-insecure", func() { c.Store.OCI.Insecure = o.insecure })
}

// openOCIStore opens store.oci.repository (nil when unset). Credentials:
// store.oci.username + password_file, else SNAPD_OCI_USERNAME /
// SNAPD_OCI_PASSWORD, else the Docker config. Nothing is contacted yet.
func openOCIStore(e *env, c *configs.Config, log *slog.Logger) (*oci.Repository, error) {
	s := c.Store.OCI
	if s.Repository == "" {
		return nil, nil
	}
	f := ociWriteFlags{ociReadFlags: ociReadFlags{ociTargetFlags: ociTargetFlags{repository: s.Repository, insecure: s.Insecure},
		username: s.Username, passwordFile: s.PasswordFile, dockerConfig: s.DockerConfig,
		timeout: time.Duration(s.Timeout), stall: time.Duration(s.StallTimeout)},
		mountFrom: s.MountFrom, jobs: s.Jobs}
	ee := *e
	ee.logger = log
	return f.open(&ee)
}
