// Package makefile_test checks that every documented make target builds the tools it
// uses before it uses them, so each README command works as the first command in a fresh
// clone with an empty bin/. It builds nothing: it reads `make -n` (the recipes a target
// would run, prerequisites included, in order), the tool sets hack/tools/build.sh
// defines, and, for every Go program a recipe runs, the tool binaries its packages look
// up with tools.Path (found in their sources, not in a list kept by hand).
//
// Programs that tests build and start themselves (the manager in the e2e suites, the
// scorecard test binary) are not followed; none of them looks up tools.
package makefile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// checker holds what every target's check shares.
type checker struct {
	root     string
	makefile string // "" for the repository's Makefile
	sets     map[string][]string
	defaults []string
	owner    map[string]string // tool binary -> its set
	lister   *goLister
	scan     *toolScan
}

func newChecker(t *testing.T) *checker {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sets, defaults, err := toolSets(root)
	if err != nil {
		t.Fatal(err)
	}
	// A Kubernetes binary's set is the default one (kube, kubectl, node); the versioned
	// control planes (kube-<minor>) provide the same names for runs that select them.
	owner := map[string]string{}
	for set, bins := range sets {
		if isVersionedKube(set) {
			continue
		}
		for _, b := range bins {
			owner[b] = set
		}
	}
	return &checker{root: root, sets: sets, defaults: defaults, owner: owner,
		lister: &goLister{root: root}, scan: &toolScan{}}
}

// check returns every tool that target's recipes or programs use without a prerequisite
// having built it first.
func (c *checker) check(target string) ([]string, error) {
	lines, err := dryRun(c.root, c.makefile, target)
	if err != nil {
		return nil, err
	}
	provided := map[string]bool{}
	built := map[string]bool{}            // tool sets a prerequisite built
	later := map[string]bool{}            // tools and sets a prerequisite builds in the background
	compiled := map[string]goInvocation{} // test binaries built by go test -c
	var problems []string
	// kubeSet is the versioned kube set (tools.EnvKubeTools) a command selects, if any:
	// its Kubernetes binaries come from that set only. One it does not provide (a
	// kubelet: the real node runs at the default version only) cannot be built for such
	// a run; tools.Path fails on it with that explanation, should a suite reach it.
	// A Go program's lookup (tools.Path) waits for a tool a background build is making; a
	// recipe that runs the binary itself does not.
	need := func(tool, what, kubeSet string, lookup bool) {
		if kubeSet != "" && tools.IsKubeBinary(tool) {
			if contains(c.sets[kubeSet], tool) && !built[kubeSet] && (!lookup || !later[kubeSet]) {
				problems = append(problems, fmt.Sprintf("%s uses %s of %s=%s before any prerequisite builds it (add set %q to TOOLS_%s)",
					what, tool, tools.EnvKubeTools, kubeSet, kubeSet, target))
			}
			return
		}
		if provided[tool] || (lookup && later[tool]) {
			return
		}
		hint := "no tool set provides it"
		if set, ok := c.owner[tool]; ok {
			hint = fmt.Sprintf("add set %q to TOOLS_%s", set, target)
		}
		if later[tool] {
			hint = "only a background build makes it, which a recipe does not wait for: take its set out of TOOLS_LATER_" + target
		}
		problems = append(problems, fmt.Sprintf("%s uses %s before any prerequisite builds it (%s)", what, tool, hint))
	}
	needProgram := func(inv goInvocation, test bool, what, kubeSet string) error {
		pkgs, err := c.lister.deps(inv, test)
		if err != nil {
			return err
		}
		uses, bad, err := c.scan.packages(pkgs)
		if err != nil {
			return err
		}
		problems = append(problems, bad...)
		for _, u := range uses {
			need(u.tool, fmt.Sprintf("%s (tools.Path at %s)", what, c.rel(u.at)), kubeSet, true)
		}
		return nil
	}
	for _, line := range lines {
		for _, cmd := range commands(line) {
			words := program(cmd)
			if len(words) == 0 {
				continue
			}
			kubeSet := assigned(cmd, tools.EnvKubeTools)
			if kubeSet == "kube" {
				kubeSet = "" // the default set, by its name
			}
			name := words[0]
			switch {
			case strings.HasSuffix(name, "hack/tools/build.sh"):
				if len(words) > 1 && words[1] == "--background" {
					c.provide(later, later, words[2:])
				} else {
					c.provide(provided, built, words[1:])
				}
			case name == "go":
				inv, ok := parseGo(words)
				if !ok {
					continue
				}
				what := fmt.Sprintf("`go %s %s`", inv.verb, strings.Join(inv.patterns, " "))
				switch {
				case inv.verb == "build" || inv.compile:
					if bin := binName(c.root, outputPath(c.root, inv)); bin != "" {
						provided[bin] = true
						if inv.compile {
							compiled[bin] = inv
						}
					}
				case inv.verb == "run":
					err = needProgram(inv, false, what, kubeSet)
				default:
					err = needProgram(inv, true, what, kubeSet)
				}
				if err != nil {
					return nil, err
				}
			default:
				bin := binName(c.root, name)
				if bin == "" && c.owner[name] != "" {
					bin = name // a tool called by its bare name through PATH
				}
				if bin == "" {
					continue
				}
				need(bin, "the recipe line `"+line+"`", "", false)
				if inv, ok := compiled[bin]; ok {
					if err := needProgram(inv, true, "bin/"+bin, kubeSet); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return dedupe(problems), nil
}

// outputPath returns the absolute path of a go build -o output.
func outputPath(root string, inv goInvocation) string {
	if filepath.IsAbs(inv.output) {
		return inv.output
	}
	return filepath.Join(root, inv.dir, inv.output)
}

func (c *checker) provide(provided, built map[string]bool, args []string) {
	sets := args
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			return // --list and friends build nothing
		}
	}
	if len(sets) == 0 {
		sets = c.defaults
	}
	for _, s := range sets {
		built[s] = true
		if isVersionedKube(s) {
			continue // linked into bin/<set>/, used only where a command selects it
		}
		for _, b := range c.sets[s] {
			provided[b] = true
		}
	}
}

// isVersionedKube reports whether a tool set is the control plane of another Kubernetes
// version than the default's (kube-<minor>).
func isVersionedKube(set string) bool { return strings.HasPrefix(set, "kube-") }

// assigned returns the value a command's leading VAR=value words give name, or "".
func assigned(words []string, name string) string {
	for _, w := range words {
		if !isAssignment(w) {
			break
		}
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			return v
		}
	}
	return ""
}

func (c *checker) rel(at string) string {
	if r, err := filepath.Rel(c.root, at); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return at
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// documentedTargets returns the targets `make help` lists (those with a ## comment).
func documentedTargets(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):.*##`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		if m[1] != "help" {
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out
}

// The README's commands, each of which must work as the first command in a fresh clone.
var readmeTargets = []string{"demo", "test", "test-e2e", "test-olm", "bench", "bundle", "deploy", "run"}

func TestEveryTargetBuildsTheToolsItUses(t *testing.T) {
	c := newChecker(t)
	targets := documentedTargets(t, c.root)
	for _, want := range readmeTargets {
		if !contains(targets, want) {
			t.Fatalf("make help does not list %q, a command the README gives", want)
		}
	}
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			problems, err := c.check(target)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("make %s: %s", target, p)
			}
		})
	}
}

// The check itself must catch the failure that made this test necessary: make demo
// renders the samples with kustomize, which only the gen set builds.
func TestCatchesATargetMissingAToolSet(t *testing.T) {
	c := newChecker(t)
	data, err := os.ReadFile(filepath.Join(c.root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^TOOLS_demo := .*$`)
	if !re.Match(data) {
		t.Fatal("the Makefile has no TOOLS_demo line to break")
	}
	broken := re.ReplaceAll(data, []byte("TOOLS_demo := kube kubectl kwok minio"))
	c.makefile = filepath.Join(t.TempDir(), "Makefile")
	if err := os.WriteFile(c.makefile, broken, 0o600); err != nil { //nolint:gosec // G703: a file in the test's temporary directory
		t.Fatal(err)
	}
	problems, err := c.check("demo")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range problems {
		if strings.Contains(p, "uses kustomize before") && strings.Contains(p, `add set "gen" to TOOLS_demo`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("demo without the gen set: want a problem naming kustomize and the gen set, got %q", problems)
	}
}

// A suite run on another Kubernetes version needs that version's set: the default
// set's kube-apiserver does not stand in for it.
func TestCatchesAVersionRunMissingItsToolSet(t *testing.T) {
	c := newChecker(t)
	data, err := os.ReadFile(filepath.Join(c.root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^(TOOLS_test := .*) \$\(KUBE_OLDEST\)$`)
	if !re.Match(data) {
		t.Fatal("the Makefile has no TOOLS_test line ending in $(KUBE_OLDEST) to break")
	}
	broken := re.ReplaceAll(data, []byte("$1"))
	c.makefile = filepath.Join(t.TempDir(), "Makefile")
	if err := os.WriteFile(c.makefile, broken, 0o600); err != nil { //nolint:gosec // G703: a file in the test's temporary directory
		t.Fatal(err)
	}
	problems, err := c.check("test")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range problems {
		if strings.Contains(p, "uses kube-apiserver of PHALANKS_KUBE_TOOLS=kube-") && strings.Contains(p, "to TOOLS_test)") {
			found = true
		}
	}
	if !found {
		t.Fatalf("test without the oldest version's set: want a problem naming its kube-apiserver, got %q", problems)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A background build is waited for by a program's tools.Path lookup, not by a recipe
// that runs the binary itself: make plugin-dist runs validate-krew-manifest, so its krew
// set cannot be left to the background.
func TestCatchesARecipeRunningABackgroundBuiltTool(t *testing.T) {
	c := newChecker(t)
	data, err := os.ReadFile(filepath.Join(c.root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^TOOLS_plugin-dist := krew$`).Match(data) {
		t.Fatal("the Makefile has no TOOLS_plugin-dist line to build on")
	}
	broken := append(data, []byte("\nTOOLS_LATER_plugin-dist := krew\n")...)
	c.makefile = filepath.Join(t.TempDir(), "Makefile")
	if err := os.WriteFile(c.makefile, broken, 0o600); err != nil { //nolint:gosec // G703: a file in the test's temporary directory
		t.Fatal(err)
	}
	problems, err := c.check("plugin-dist")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range problems {
		if strings.Contains(p, "uses validate-krew-manifest") && strings.Contains(p, "only a background build makes it") {
			found = true
		}
	}
	if !found {
		t.Fatalf("plugin-dist with krew in the background: want a problem naming validate-krew-manifest, got %q", problems)
	}
}
