package main

import (
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
)

// runOCIOptions are snapd run's store.oci flags.
type runOCIOptions struct {
	repository string
	insecure   bool
}

func addRunOCIFlags(cmd *cobra.Command, o *runOCIOptions) {
	f := cmd.Flags()
	f.StringVar(&o.repository, "oci-repository", "", "OCI repository HOST[:PORT]/NAME: publish generations in the skeleton layout (tensor bytes to the registry, skeletons to Git; store.oci in the config)")
	f.BoolVar(&o.insecure, "oci-insecure", false, "allow plain HTTP to a non-loopback registry (store.oci.insecure)")
}

func applyRunOCIFlags(c *configs.Config, o *runOCIOptions, set func(string, func())) {
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
	f := ociFlags{repository: s.Repository, insecure: s.Insecure, username: s.Username, passwordFile: s.PasswordFile,
		dockerConfig: s.DockerConfig, mountFrom: s.MountFrom, jobs: s.Jobs,
		timeout: time.Duration(s.Timeout), stall: time.Duration(s.StallTimeout)}
	ee := *e
	ee.logger = log
	return f.open(&ee)
}
