package makefile_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// dryRun returns the commands `make -n target` would run, one per entry, with
// backslash-continued lines joined. makefile may be empty for the repository's own.
func dryRun(root, makefile, target string) ([]string, error) {
	args := []string{"--no-print-directory", "-C", root, "-n"}
	if makefile != "" {
		args = append(args, "-f", makefile)
	}
	cmd := exec.Command("make", append(args, target)...)
	// A surrounding make (make test runs this test) must not pass its flags down.
	cmd.Env = withoutEnv(os.Environ(), "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("make -n %s: %w\n%s", target, err, out)
	}
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(l)
		if s := strings.TrimSpace(cur.String()); s != "" {
			lines = append(lines, s)
		}
		cur.Reset()
	}
	return lines, nil
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
outer:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue outer
			}
		}
		out = append(out, kv)
	}
	return out
}

// commands splits a shell line into simple commands (at ;, |, ||, &&, parentheses),
// each a list of words with quotes removed. It is enough for Makefile recipes, not a
// shell.
func commands(line string) [][]string {
	var (
		out   [][]string
		words []string
		word  strings.Builder
		inW   bool
		quote rune
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
			word.Reset()
			inW = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			out = append(out, words)
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inW = r, true
		case r == ' ' || r == '\t':
			endWord()
		case r == ';' || r == '|' || r == '(' || r == ')' || (r == '&' && i+1 < len(rs) && rs[i+1] == '&'):
			endCmd()
			if r == '&' || (r == '|' && i+1 < len(rs) && rs[i+1] == '|') {
				i++
			}
		default:
			word.WriteRune(r)
			inW = true
		}
	}
	endCmd()
	return out
}

// shellKeywords start compound commands; the command proper follows them.
var shellKeywords = map[string]bool{"if": true, "then": true, "else": true, "elif": true, "fi": true,
	"do": true, "done": true, "while": true, "for": true, "!": true}

// program returns the command's words from the program name on, skipping shell keywords
// and leading VAR=value assignments.
func program(words []string) []string {
	for len(words) > 0 && (shellKeywords[words[0]] || isAssignment(words[0])) {
		words = words[1:]
	}
	return words
}

func isAssignment(w string) bool {
	i := strings.IndexByte(w, '=')
	return i > 0 && !strings.ContainsAny(w[:i], "/-.")
}

// goInvocation is a `go run|test|build` command from a recipe.
type goInvocation struct {
	verb     string // run, test or build
	dir      string // -C, relative to the repository root; "" for the root
	tags     string
	output   string // -o
	compile  bool   // go test -c
	bench    bool   // go test -bench
	patterns []string
}

// valueFlags are the go command flags (and test flags) that take a separate value.
var valueFlags = map[string]bool{"-C": true, "-tags": true, "-o": true, "-run": true, "-bench": true,
	"-benchtime": true, "-timeout": true, "-count": true, "-p": true, "-ldflags": true, "-gcflags": true,
	"-mod": true, "-coverprofile": true, "-covermode": true, "-exec": true, "-parallel": true}

// parseGo parses the words of a go command; ok is false for other go subcommands (vet,
// mod, fmt, …), which run nothing of ours.
func parseGo(words []string) (inv goInvocation, ok bool) {
	args := words[1:]
	if len(args) >= 2 && args[0] == "-C" {
		inv.dir, args = args[1], args[2:]
	}
	if len(args) == 0 {
		return inv, false
	}
	inv.verb = args[0]
	switch inv.verb {
	case "run", "test", "build":
	default:
		return inv, false
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case a == "-c":
			inv.compile = true
		case strings.HasPrefix(a, "-"):
			if !hasValue && valueFlags[name] && i+1 < len(args) {
				i++
				value = args[i]
			}
			switch name {
			case "-bench":
				inv.bench = true
			case "-tags":
				inv.tags = value
			case "-o":
				inv.output = value
			}
		default:
			inv.patterns = append(inv.patterns, a)
			if inv.verb == "run" {
				return inv, true // the rest are the program's own arguments
			}
		}
	}
	return inv, true
}

// binName returns the name of a path under the repository's bin/, or "".
func binName(root, path string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	if filepath.Dir(path) == filepath.Join(root, "bin") {
		return filepath.Base(path)
	}
	return ""
}
