package makefile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

const (
	ourModule  = "github.com/phalanks/phalanks-operator"
	toolsPkg   = ourModule + "/test/harness/tools"
	toolLookup = "Path" // tools.Path("name") is how our code finds a tool binary
)

// listedPackage is the part of `go list -json` the scan reads.
type listedPackage struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Module       *struct{ Path string }
}

// goLister runs `go list -deps` once per distinct program and remembers the answer.
type goLister struct {
	root  string
	mu    sync.Mutex
	cache map[string][]listedPackage
}

// deps returns our packages in the program a go command runs: for go run, the main
// package and its dependencies; for go test, the test binaries of the packages whose
// tests the command runs (Test, Fuzz and Example functions; Benchmark ones with -bench)
// and their dependencies.
func (l *goLister) deps(inv goInvocation, test bool) ([]listedPackage, error) {
	key := fmt.Sprintf("%s|%s|%v|%v|%s", inv.dir, inv.tags, test, inv.bench, strings.Join(inv.patterns, " "))
	l.mu.Lock()
	defer l.mu.Unlock()
	if pkgs, ok := l.cache[key]; ok {
		return pkgs, nil
	}
	patterns := inv.patterns
	if test {
		matched, err := l.list(inv, false, patterns)
		if err != nil {
			return nil, err
		}
		patterns = nil
		for _, p := range matched {
			run, err := runsTests(p, inv.bench)
			if err != nil {
				return nil, err
			}
			if run {
				patterns = append(patterns, p.ImportPath)
			}
		}
	}
	var pkgs []listedPackage
	if len(patterns) > 0 {
		var err error
		if pkgs, err = l.list(inv, test, patterns, "-deps"); err != nil {
			return nil, err
		}
	}
	if l.cache == nil {
		l.cache = map[string][]listedPackage{}
	}
	l.cache[key] = pkgs
	return pkgs, nil
}

func (l *goLister) list(inv goInvocation, test bool, patterns []string, flags ...string) ([]listedPackage, error) {
	args := append([]string{"list", "-json=ImportPath,Dir,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,Module"}, flags...)
	if test {
		args = append(args, "-test")
	}
	if inv.tags != "" {
		args = append(args, "-tags", inv.tags)
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = filepath.Join(l.root, inv.dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), cmd.Dir, err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Module != nil && strings.HasPrefix(p.Module.Path, ourModule) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// runsTests reports whether go test runs anything of the package: a Test, Fuzz or
// Example function in its test files, or a Benchmark function when bench is set.
func runsTests(p listedPackage, bench bool) (bool, error) {
	fset := token.NewFileSet()
	for _, f := range append(append([]string(nil), p.TestGoFiles...), p.XTestGoFiles...) {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return false, err
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			n := fn.Name.Name
			if strings.HasPrefix(n, "Test") || strings.HasPrefix(n, "Fuzz") || strings.HasPrefix(n, "Example") ||
				(bench && strings.HasPrefix(n, "Benchmark")) {
				return true, nil
			}
		}
	}
	return false, nil
}

// toolUse is one tool a program looks up, and where.
type toolUse struct {
	tool string
	at   string
}

// toolScan finds, in our packages' sources, the tool binaries they look up with
// tools.Path: a literal argument, or a parameter of a function in the same package that
// is called with literals (as a harness's "start component <name>" helper is). Any other
// argument is reported, so that no lookup hides from the Makefile check.
type toolScan struct {
	mu    sync.Mutex
	files map[string]*fileScan // by file path
}

type fileScan struct {
	uses     []toolUse
	problems []string
}

func (s *toolScan) packages(pkgs []listedPackage) (uses []toolUse, problems []string, err error) {
	byDir := map[string]map[string]bool{}
	for _, p := range pkgs {
		// The lookup's own tests call it with made-up names on a made-up directory.
		if isToolsPackage(p.ImportPath) {
			continue
		}
		if byDir[p.Dir] == nil {
			byDir[p.Dir] = map[string]bool{}
		}
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.TestGoFiles, p.XTestGoFiles} {
			for _, f := range list {
				// The generated main of a test binary lives in the build cache.
				if !filepath.IsAbs(f) {
					byDir[p.Dir][f] = true
				}
			}
		}
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		var names []string
		for f := range byDir[dir] {
			names = append(names, filepath.Join(dir, f))
		}
		sort.Strings(names)
		fs, err := s.scanPackageFiles(names)
		if err != nil {
			return nil, nil, err
		}
		uses = append(uses, fs.uses...)
		problems = append(problems, fs.problems...)
	}
	return uses, problems, nil
}

// isToolsPackage reports whether a listed package (plain, or a test variant such as
// "…/tools_test […/tools.test]") is the tools package or its external test package.
func isToolsPackage(importPath string) bool {
	path, _, _ := strings.Cut(importPath, " ")
	return path == toolsPkg || path == toolsPkg+"_test"
}

// scanPackageFiles scans the files of one package together: a forwarding function and
// its callers may sit in different files.
func (s *toolScan) scanPackageFiles(paths []string) (*fileScan, error) {
	key := strings.Join(paths, "\x00")
	s.mu.Lock()
	if fs, ok := s.files[key]; ok {
		s.mu.Unlock()
		return fs, nil
	}
	s.mu.Unlock()

	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	fs := &fileScan{}
	// forwarders: function name -> index of the parameter handed to tools.Path.
	forwarders := map[string]int{}
	for _, f := range files {
		local := importName(f, toolsPkg)
		if local == "" {
			continue
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			params := paramIndex(fn)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isCall(call, local, toolLookup) || len(call.Args) != 1 {
					return true
				}
				at := fset.Position(call.Pos()).String()
				if name, ok := stringLit(call.Args[0]); ok {
					fs.uses = append(fs.uses, toolUse{tool: name, at: at})
				} else if idx, ok := paramOf(params, call.Args[0]); ok {
					forwarders[fn.Name.Name] = idx
				} else {
					fs.problems = append(fs.problems, at+": tools.Path needs a literal tool name, or a parameter of a function called with one")
				}
				return true
			})
		}
	}
	if len(forwarders) > 0 {
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				idx, ok := forwarders[calledName(call)]
				if !ok || idx >= len(call.Args) {
					return true
				}
				at := fset.Position(call.Pos()).String()
				if name, ok := stringLit(call.Args[idx]); ok {
					fs.uses = append(fs.uses, toolUse{tool: name, at: at})
				} else {
					fs.problems = append(fs.problems, fmt.Sprintf("%s: %s passes a tool name to tools.Path; call it with a literal", at, calledName(call)))
				}
				return true
			})
		}
	}
	s.mu.Lock()
	if s.files == nil {
		s.files = map[string]*fileScan{}
	}
	s.files[key] = fs
	s.mu.Unlock()
	return fs, nil
}

func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return filepath.Base(path)
	}
	return ""
}

func paramIndex(fn *ast.FuncDecl) map[string]int {
	out := map[string]int{}
	i := 0
	for _, field := range fn.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			out[n.Name] = i
			i++
		}
	}
	return out
}

// paramOf returns the index of the parameter e names, if it names one.
func paramOf(params map[string]int, e ast.Expr) (int, bool) {
	id, ok := e.(*ast.Ident)
	if !ok {
		return 0, false
	}
	idx, ok := params[id.Name]
	return idx, ok
}

func isCall(call *ast.CallExpr, pkg, fn string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != fn {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func calledName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// toolSets reads the tool sets from hack/tools/build.sh: set -> binaries, and the sets
// it builds when none is named.
func toolSets(root string) (sets map[string][]string, defaults []string, err error) {
	script := filepath.Join(root, "hack", "tools", "build.sh")
	out, err := exec.Command(script, "--list").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("%s --list: %w", script, err)
	}
	sets = map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, bins, ok := strings.Cut(line, ": ")
		if !ok {
			return nil, nil, fmt.Errorf("%s --list: unexpected line %q", script, line)
		}
		sets[name] = strings.Fields(bins)
	}
	out, err = exec.Command(script, "--defaults").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("%s --defaults: %w", script, err)
	}
	return sets, strings.Fields(string(out)), nil
}
