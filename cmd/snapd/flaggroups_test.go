package main

import (
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/snapd-ml/snapd/gitops"
)

// flagMeanings lists the flag names that mean different things in
// different commands, with how many meanings (so how many help texts)
// each has. Every other visible flag has one help text in every command
// that takes it. No flag of a group in flaggroups.go may be listed here.
var flagMeanings = map[string]int{
	"dry-run":        2, // gc and ranks gc: delete nothing; review: print the review instead of posting it
	"exclude":        2, // diff: leave arrays out of the comparison; review: out of the threshold judgement
	"include":        2, // the same two
	"from":           2, // an input format; ranks diff: the older generation
	"to":             2, // an output format; ranks diff: the newer generation
	"gen":            4, // the generation written (convert, oci push), cloned, requested, assembled (ranks)
	"hmac-key":       2, // a writer's key that adds HMACs (convert, oci push, run); a verifier's that checks them
	"keep":           2, // gc: generations in STATE_DIR/gens (or manifests); ranks gc: rank manifests
	"path":           2, // the generations' directory in Git; review: the path a local review shows
	"repo":           2, // checkout: a local Git repository; review: a GitHub OWNER/NAME
	"prev":           2, // the generation a writer chains to; verify: the one the chain is checked against
	"prev-merkle":    2, // the same two
	"rows-per-chunk": 2, // the chunk geometry written; diff: the geometry changed chunks are named by
	"stream":         2, // convert: the WSUM file to write (a string); run: streaming on (a bool)
	"timeout":        2, // review: one API request; wait: the whole wait
	"token-env":      2, // review: a GitHub token; verify-repo: an HTTP(S) token for cloning
	"wsum":           3, // a streamed input's WSUM; delta make: TARGET's; delta apply: the result's
}

// TestFlagHelpTextsAgree walks every command and checks that each visible
// flag name has one help text across the commands that take it (or as
// many as flagMeanings says), and that the shared groups' flags, which are
// defined once, are not among the exceptions.
func TestFlagHelpTextsAgree(t *testing.T) {
	texts := map[string]map[string][]string{} // flag name -> help text -> command paths
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return // not in --help
			}
			if texts[f.Name] == nil {
				texts[f.Name] = map[string][]string{}
			}
			texts[f.Name][f.Usage] = append(texts[f.Name][f.Usage], c.CommandPath())
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCommand(&env{}))
	if len(texts) < 50 {
		t.Fatalf("walked only %d flag names: the walk misses commands", len(texts))
	}
	names := make([]string, 0, len(texts))
	for n := range texts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		want := flagMeanings[name]
		if want == 0 {
			want = 1
		}
		if got := len(texts[name]); got != want {
			var b strings.Builder
			for u, cmds := range texts[name] {
				b.WriteString("\n  " + strings.Join(cmds, ", ") + ": " + u)
			}
			t.Errorf("--%s has %d help texts, want %d (define it once in flaggroups.go):%s", name, got, want, b.String())
		}
	}
	for name := range flagMeanings {
		if texts[name] == nil {
			t.Errorf("flagMeanings lists --%s, which no command has", name)
		}
	}
	// Every command with a group's flag uses the group's text, but where
	// the name has a second meaning named in flagMeanings (the groups own
	// one meaning each: --hmac-key and --path as a verifier and
	// a ledger read them).
	groups := pflag.NewFlagSet("groups", pflag.ContinueOnError)
	new(ociWriteFlags).register(groups)
	new(ledgerFlags).register(groups)
	new(trustFlags).register(groups)
	groups.VisitAll(func(f *pflag.Flag) {
		if texts[f.Name][f.Usage] == nil {
			t.Errorf("--%s: no command uses the group's help text %q", f.Name, f.Usage)
		}
		if n := flagMeanings[f.Name]; n > 2 {
			t.Errorf("--%s belongs to a flag group but has %d meanings", f.Name, n)
		}
	})
	for _, name := range []string{"oci-repository", "oci-insecure", "oci-username", "oci-password-file", "oci-docker-config", "oci-timeout", "oci-stall-timeout", "oci-mount-from", "oci-jobs", "branch", "tag-prefix", "require-signature", "allow-unsigned"} {
		if _, ok := flagMeanings[name]; ok || groups.Lookup(name) == nil {
			t.Errorf("--%s: want a group flag with one meaning", name)
		}
	}
}

// TestFlagGroupsWhereHonoured: the upload flags are offered only by the
// command that uploads, every --branch defaults to gitops' branch (run's
// comes from its config), and the commands that read a registry take its
// credentials and timeouts.
func TestFlagGroupsWhereHonoured(t *testing.T) {
	root := newRootCommand(&env{})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		for _, name := range []string{"oci-jobs", "oci-mount-from"} {
			if f := c.LocalFlags().Lookup(name); f != nil && path != "snapd oci push" {
				t.Errorf("%s offers the upload flag --%s", path, name)
			}
		}
		if f := c.LocalFlags().Lookup("branch"); f != nil {
			want := gitops.DefaultBranch
			if path == "snapd run" {
				want = ""
			}
			if f.DefValue != want {
				t.Errorf("%s --branch defaults to %q, want %q", path, f.DefValue, want)
			}
		}
		if c.LocalFlags().Lookup("oci-repository") != nil && path != "snapd run" {
			for _, name := range []string{"oci-insecure", "oci-username", "oci-password-file", "oci-docker-config", "oci-timeout", "oci-stall-timeout"} {
				if c.LocalFlags().Lookup(name) == nil {
					t.Errorf("%s has --oci-repository but not --%s", path, name)
				}
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	for _, args := range [][]string{{"oci", "push"}, {"assemble"}, {"ranks", "assemble"}} {
		c, _, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		upload := c.LocalFlags().Lookup("oci-jobs") != nil
		if want := args[0] == "oci"; upload != want {
			t.Errorf("%v: --oci-jobs offered %v, want %v", args, upload, want)
		}
	}
}
