package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/gitops/review"
)

// Environment variables that stand for the global flags.
const (
	envStateDir = "SNAPD_STATE_DIR"
	envConfig   = "SNAPD_CONFIG"
)

// globalOptions are the root's persistent flags, shared by every command
// that reads the daemon's state.
type globalOptions struct {
	stateDir string
	config   string
	quiet    bool // no progress lines (progress.go)
}

func addGlobalFlags(root *cobra.Command, g *globalOptions) {
	pf := root.PersistentFlags()
	pf.StringVar(&g.stateDir, "state-dir", "", "state directory: wal/, gens/, keys/, ring/, push-queue/, repo/ (env "+envStateDir+"; else the config's state_dir; else "+configs.Default().StateDir+")")
	pf.StringVar(&g.config, "config", "", "YAML config file, unknown keys are errors (env "+envConfig+")")
	pf.BoolVarP(&g.quiet, "quiet", "q", false, "no progress line on stderr (drawn only when stderr is a terminal)")
}

// configPath is --config, else $SNAPD_CONFIG ("" for none).
func (e *env) configPath(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("config"); f != nil && f.Changed {
		return e.global.config
	}
	return e.getenv(envConfig)
}

// stateDirOverride is --state-dir, else $SNAPD_STATE_DIR; ok false when
// neither is set.
func (e *env) stateDirOverride(cmd *cobra.Command) (string, bool) {
	if f := cmd.Flags().Lookup("state-dir"); f != nil && f.Changed {
		return e.global.stateDir, true
	}
	if v := e.getenv(envStateDir); v != "" {
		return v, true
	}
	return "", false
}

// resolveStateDir is the state directory a command works on: --state-dir,
// $SNAPD_STATE_DIR, the config file's state_dir (--config or
// $SNAPD_CONFIG), or the default. It reads the config file but creates
// nothing.
func (e *env) resolveStateDir(cmd *cobra.Command) (string, error) {
	if d, ok := e.stateDirOverride(cmd); ok {
		if d == "" {
			return "", usageError{errors.New("--state-dir is empty")}
		}
		return d, nil
	}
	if p := e.configPath(cmd); p != "" {
		c, err := configs.Load(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", ioError{err}
			}
			return "", usageError{err}
		}
		return c.StateDir, nil
	}
	return configs.Default().StateDir, nil
}

// existingStateDir resolves the state directory and checks it exists, for
// operator commands that must never create state: on a mistyped path they
// fail with a hint instead of reporting an empty, healthy state.
func (e *env) existingStateDir(cmd *cobra.Command) (string, error) {
	d, err := e.resolveStateDir(cmd)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(d)
	if err == nil && !st.IsDir() {
		err = fmt.Errorf("state directory %s is not a directory", d)
	}
	if err != nil {
		return "", withHint(ioError{err}, fmt.Sprintf("pass the daemon's state directory with --state-dir or %s (snapd run --state-dir DIR; the systemd unit uses /var/lib/snapd-ml)", envStateDir))
	}
	return d, nil
}

// listenMetrics opens the metrics port before the daemon creates any
// state, so a busy port (a second daemon, say) fails first, with a hint.
// It returns nil when metrics are off.
func listenMetrics(c *configs.Config) (net.Listener, error) {
	if c.Metrics.Addr == "off" || c.Metrics.Addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", c.Metrics.Addr)
	if err != nil {
		h := "another process listens there (a second snapd run?); give this daemon its own port with --metrics-addr HOST:PORT (metrics.addr), or --metrics-addr off"
		if !errors.Is(err, syscall.EADDRINUSE) {
			h = "metrics.addr (--metrics-addr) must be a local HOST:PORT, or off"
		}
		return nil, withHint(ioError{fmt.Errorf("metrics listener %s: %w", c.Metrics.Addr, err)}, h)
	}
	return ln, nil
}

// checkGitHubCredentials loads the github section's credential (token
// file, token variable or App key) once, so a missing or malformed one is
// refused before the daemon creates anything (pullRequestDeps loads it
// again when it builds the client).
func checkGitHubCredentials(e *env, c *configs.Config) error {
	g := c.GitHub
	switch {
	case g.Repo == "":
		return nil
	case g.TokenFile != "":
		if _, err := review.TokenFromFile(g.TokenFile); err != nil {
			return withHint(credError(fmt.Errorf("github.token_file: %w", err)), "put a GitHub token with contents:read and pull_requests:write into the file")
		}
	case g.TokenEnv != "":
		if _, err := review.TokenFromEnv(e.getenv, g.TokenEnv); err != nil {
			return usageError{fmt.Errorf("github.token_env: %w", err)}
		}
	default:
		if _, err := review.LoadAppKey(g.AppKey); err != nil {
			return credError(fmt.Errorf("github.app_key: %w", err))
		}
	}
	return nil
}
