package images

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Dockerfile is what ParseDockerfile reads from a Dockerfile: the image its final stage
// makes, as a Spec, and how its builder stages compile each Go binary.
type Dockerfile struct {
	Spec Spec
	// GoBuilds maps an image path holding a compiled binary to the go build that made it.
	GoBuilds map[string]DockerGoBuild
}

// DockerGoBuild is a `go build` of a builder stage.
type DockerGoBuild struct {
	// Env holds the NAME=value assignments before `go`, variables expanded.
	Env map[string]string
	// Flags are the arguments between `build` and the package, without `-o OUT`.
	Flags []string
	// Binary is the module (a repository directory) and package it compiles.
	Binary GoBinary
	// Dir is the stage directory it runs in, holding Binary.Module.
	Dir string
	// Copied maps each path of the stage that a COPY from the context filled before the
	// build to the repository path it came from.
	Copied map[string]string
}

// dockerStage is one FROM … stage while it is read.
type dockerStage struct {
	name    string
	base    string
	args    map[string]string
	workdir string
	// copied maps a path of this stage to the repository path COPY put there.
	copied map[string]string
	// built maps a path of this stage to the binary a go build wrote there.
	built map[string]*GoBinary
	// goBuilds holds the go build behind each built path.
	goBuilds map[string]DockerGoBuild
	// caches maps a path of this stage to the catalog directory opm cached there.
	caches map[string]string
	// spec is the image a final (FROM scratch) stage makes.
	spec Spec
}

// ParseDockerfile reads the Dockerfile at path (relative to root) with the build
// arguments args (VERSION, REVISION, TARGETOS, TARGETARCH, …) into the image its final
// stage makes. It understands what this project's Dockerfiles use and fails on anything
// else, so a new instruction cannot slip past the comparison with the daemonless build:
// builder stages may COPY from the context, set WORKDIR and ARG, and RUN `go mod
// download`, `go build … -o OUT PKG` and `go run ./servecache CONFIGS OUT` (after `cd DIR
// &&`); the final stage must be FROM scratch and may COPY (from
// the context or --from a stage, with --chown), and set USER, ENTRYPOINT, CMD, ENV,
// WORKDIR, EXPOSE, LABEL and ARG.
func ParseDockerfile(root, name string, args map[string]string) (*Dockerfile, error) {
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return nil, err
	}
	return ParseDockerfileText(root, name, string(data), args)
}

// ParseDockerfileText is ParseDockerfile on the Dockerfile text; name is for messages.
func ParseDockerfileText(root, name, text string, args map[string]string) (*Dockerfile, error) {
	instructions, err := splitInstructions(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	globalArgs := map[string]string{}
	var stages []*dockerStage
	for _, in := range instructions {
		if err := applyInstruction(root, &stages, globalArgs, args, in); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", name, in.line, in.keyword, err)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s has no FROM", name)
	}
	final := stages[len(stages)-1]
	if final.base != "scratch" {
		return nil, fmt.Errorf("%s: the final stage is FROM %s; the daemonless build starts from an empty base (scratch)", name, final.base)
	}
	return finalImage(final), nil
}

type instruction struct {
	line    int
	keyword string
	rest    string
}

// splitInstructions joins continuation lines and drops comments and blank lines.
func splitInstructions(text string) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\"))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(trimmed)
		keyword, rest, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{line: start, keyword: strings.ToUpper(keyword), rest: strings.TrimSpace(rest)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", start)
	}
	return out, nil
}

func applyInstruction(root string, stages *[]*dockerStage, globalArgs, buildArgs map[string]string, in instruction) error {
	if in.keyword == "FROM" {
		return from(stages, globalArgs, buildArgs, in.rest)
	}
	if len(*stages) == 0 {
		if in.keyword != "ARG" {
			return fmt.Errorf("before the first FROM")
		}
		name, value := parseArg(in.rest, buildArgs)
		globalArgs[name] = value
		return nil
	}
	st := (*stages)[len(*stages)-1]
	switch in.keyword {
	case "ARG":
		name, value := parseArg(in.rest, buildArgs)
		if v, ok := globalArgs[name]; ok && value == "" {
			value = v
		}
		st.args[name] = value
		return nil
	case "WORKDIR":
		st.workdir = st.resolve(st.expand(in.rest))
		st.spec.WorkingDir = st.workdir
		return nil
	case "COPY", "ADD":
		return st.copy(root, *stages, in.rest)
	case "RUN":
		return st.run(in.rest)
	case "USER", "ENTRYPOINT", "CMD", "ENV", "EXPOSE", "LABEL":
		return st.setConfig(in.keyword, in.rest)
	}
	return fmt.Errorf("not understood; teach ParseDockerfile and the daemonless build about it")
}

func from(stages *[]*dockerStage, globalArgs, buildArgs map[string]string, rest string) error {
	fields := strings.Fields(rest)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		if !strings.HasPrefix(fields[0], "--platform=") {
			return fmt.Errorf("flag %s not understood", fields[0])
		}
		fields = fields[1:]
	}
	st := &dockerStage{
		args: map[string]string{}, workdir: "/",
		copied: map[string]string{}, built: map[string]*GoBinary{}, goBuilds: map[string]DockerGoBuild{}, caches: map[string]string{},
		spec: Spec{Env: []string{DefaultPath}, WorkingDir: DefaultWorkingDir, Labels: map[string]string{}},
	}
	switch {
	case len(fields) == 1:
	case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
		st.name = fields[2]
	default:
		return fmt.Errorf("want FROM IMAGE [AS NAME], got %q", rest)
	}
	st.base = expand(fields[0], globalArgs)
	*stages = append(*stages, st)
	return nil
}

func parseArg(rest string, buildArgs map[string]string) (string, string) {
	name, def, _ := strings.Cut(strings.TrimSpace(rest), "=")
	if v, ok := buildArgs[name]; ok {
		return name, v
	}
	return name, strings.Trim(def, `"`)
}

var variable = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand substitutes $VAR, ${VAR} and ${VAR:-default} from vars.
func expand(s string, vars map[string]string) string {
	return variable.ReplaceAllStringFunc(s, func(m string) string {
		g := variable.FindStringSubmatch(m)
		name := g[1] + g[4]
		if v := vars[name]; v != "" {
			return v
		}
		return g[3]
	})
}

func (st *dockerStage) expand(s string) string { return expand(s, st.args) }

// resolve makes p absolute against the stage's working directory.
func (st *dockerStage) resolve(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(st.workdir, p)
}

func (st *dockerStage) copy(root string, stages []*dockerStage, rest string) error {
	fields := strings.Fields(st.expand(rest))
	var fromStage *dockerStage
	uid, gid := 0, 0
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		flag, value, _ := strings.Cut(fields[0], "=")
		switch flag {
		case "--from":
			for _, s := range stages {
				if s.name == value {
					fromStage = s
				}
			}
			if fromStage == nil {
				return fmt.Errorf("--from=%s names no earlier stage", value)
			}
		case "--chown":
			if _, err := fmt.Sscanf(value, "%d:%d", &uid, &gid); err != nil {
				return fmt.Errorf("--chown=%s: want numeric UID:GID", value)
			}
		default:
			return fmt.Errorf("flag %s not understood", flag)
		}
		fields = fields[1:]
	}
	if len(fields) < 2 {
		return fmt.Errorf("want sources and a destination, got %q", rest)
	}
	sources, dstArg := fields[:len(fields)-1], fields[len(fields)-1]
	intoDir := strings.HasSuffix(dstArg, "/") || len(sources) > 1
	if fromStage == nil {
		var err error
		if sources, err = globContext(root, sources); err != nil {
			return err
		}
		intoDir = intoDir || len(sources) > 1
	}
	for _, src := range sources {
		dst := st.resolve(dstArg)
		if fromStage == nil {
			ctx := path.Clean(src)
			info, err := os.Stat(filepath.Join(root, ctx))
			if err != nil {
				return err
			}
			if !info.IsDir() && intoDir {
				dst = path.Join(dst, path.Base(ctx))
			}
			st.copied[dst] = ctx
			st.spec.Files = append(st.spec.Files, File{Path: dst, Context: ctx, UID: uid, GID: gid})
			continue
		}
		from := fromStage.resolve(src)
		if intoDir {
			dst = path.Join(dst, path.Base(from))
		}
		switch {
		case fromStage.built[from] != nil:
			st.built[dst] = fromStage.built[from]
			st.goBuilds[dst] = fromStage.goBuilds[from]
			st.spec.Files = append(st.spec.Files, File{Path: dst, Go: fromStage.built[from], UID: uid, GID: gid})
		case fromStage.caches[from] != "":
			st.caches[dst] = fromStage.caches[from]
			st.spec.Files = append(st.spec.Files, File{Path: dst, ServeCache: fromStage.caches[from], UID: uid, GID: gid})
		default:
			return fmt.Errorf("%s of stage %s is neither a go build output nor an opm serve cache", from, fromStage.name)
		}
	}
	return nil
}

// globContext expands the wildcards of COPY sources from the context (relative to
// root) as a builder does; a pattern that matches nothing is an error, as it is there.
func globContext(root string, sources []string) ([]string, error) {
	var out []string
	for _, src := range sources {
		if !strings.ContainsAny(src, "*?[") {
			out = append(out, src)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(src)))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%s matches no file of the context", src)
		}
		for _, m := range matches {
			rel, err := filepath.Rel(root, m)
			if err != nil {
				return nil, err
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out, nil
}

func (st *dockerStage) run(rest string) error {
	if st.base == "scratch" {
		return fmt.Errorf("RUN on an empty base: the daemonless build runs nothing inside the image")
	}
	words, err := shellWords(rest)
	if err != nil {
		return err
	}
	cwd := st.workdir
	for _, cmd := range splitAnd(words) {
		env := map[string]string{}
		for len(cmd) > 0 && strings.Contains(cmd[0], "=") && !strings.HasPrefix(cmd[0], "-") {
			k, v, _ := strings.Cut(cmd[0], "=")
			env[k] = st.expand(v)
			cmd = cmd[1:]
		}
		switch {
		case len(cmd) == 2 && cmd[0] == "cd":
			cwd = path.Join(cwd, cmd[1])
		case len(cmd) == 3 && cmd[0] == "go" && cmd[1] == "mod" && cmd[2] == "download":
		case len(cmd) > 2 && cmd[0] == "go" && cmd[1] == "build":
			if err := st.goBuild(cwd, env, cmd[2:]); err != nil {
				return err
			}
		case len(cmd) > 2 && cmd[0] == "go" && cmd[1] == "run":
			if err := st.goRun(cwd, cmd[2:]); err != nil {
				return err
			}
		default:
			return fmt.Errorf("command %q not understood", strings.Join(cmd, " "))
		}
	}
	return nil
}

func (st *dockerStage) goBuild(cwd string, env map[string]string, args []string) error {
	var flags []string
	out := ""
	for i := 0; i < len(args)-1; i++ {
		if args[i] == "-o" {
			out = args[i+1]
			i++
			continue
		}
		flags = append(flags, args[i])
	}
	if out == "" {
		return fmt.Errorf("go build without -o")
	}
	pkg := args[len(args)-1]
	module, err := st.module(cwd)
	if err != nil {
		return err
	}
	bin := &GoBinary{Module: module, Package: pkg}
	for _, f := range flags {
		if tags, ok := strings.CutPrefix(f, "-tags="); ok {
			bin.Tags = strings.Split(tags, ",")
		}
	}
	dst := st.resolve(st.expand(out))
	st.built[dst] = bin
	st.goBuilds[dst] = DockerGoBuild{Env: env, Flags: flags, Binary: *bin, Dir: cwd, Copied: maps.Clone(st.copied)}
	return nil
}

// goRun understands the one program a builder stage runs: servecache, building the
// catalog's serve cache.
func (st *dockerStage) goRun(cwd string, args []string) error {
	module, err := st.module(cwd)
	if err != nil {
		return err
	}
	if module != servecache.Module || args[0] != servecache.Package || len(args) != 3 {
		return fmt.Errorf("go run %s in %s: only %s %s CONFIGS OUT is understood", strings.Join(args, " "), module, servecache.Module, servecache.Package)
	}
	configs, ok := st.copied[st.resolve(args[1])]
	if !ok {
		return fmt.Errorf("servecache %s: no COPY filled it", args[1])
	}
	st.caches[st.resolve(args[2])] = configs
	return nil
}

// module returns the repository directory a builder stage's working directory cwd holds:
// the stage's WORKDIR holds the root, a COPY of a directory fills the others.
func (st *dockerStage) module(cwd string) (string, error) {
	if m, ok := st.copied[cwd]; ok {
		return m, nil
	}
	if cwd == st.workdir {
		return ".", nil
	}
	return "", fmt.Errorf("%s: no COPY filled it", cwd)
}

func (st *dockerStage) setConfig(keyword, rest string) error {
	if st.base != "scratch" {
		return nil // a builder stage's config does not reach the image
	}
	switch keyword {
	case "USER":
		st.spec.User = st.expand(rest)
	case "ENTRYPOINT", "CMD":
		var argv []string
		if err := json.Unmarshal([]byte(rest), &argv); err != nil {
			return fmt.Errorf("want the exec (JSON) form: %w", err)
		}
		if keyword == "ENTRYPOINT" {
			st.spec.Entrypoint = argv
		} else {
			st.spec.Cmd = argv
		}
	case "EXPOSE":
		for _, p := range strings.Fields(st.expand(rest)) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			st.spec.ExposedPorts = append(st.spec.ExposedPorts, p)
		}
	case "ENV", "LABEL":
		pairs, err := keyValues(rest)
		if err != nil {
			return err
		}
		for _, kv := range pairs {
			v := st.expand(kv[1])
			if keyword == "LABEL" {
				st.spec.Labels[kv[0]] = v
				continue
			}
			st.spec.Env = slices.DeleteFunc(st.spec.Env, func(e string) bool { return strings.HasPrefix(e, kv[0]+"=") })
			st.spec.Env = append(st.spec.Env, kv[0]+"="+v)
		}
	}
	return nil
}

// keyValues parses `k=v k2="v 2"` pairs.
func keyValues(rest string) ([][2]string, error) {
	words, err := shellWords(rest)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, fmt.Errorf("want key=value, got %q", w)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// shellWords splits a command line into words, honouring single and double quotes; it
// keeps "&&" as a word of its own.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
				continue
			}
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// splitAnd splits words into the commands joined by "&&".
func splitAnd(words []string) [][]string {
	var out [][]string
	var cur []string
	for _, w := range words {
		if w == "&&" {
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}

func finalImage(final *dockerStage) *Dockerfile {
	return &Dockerfile{Spec: final.spec, GoBuilds: final.goBuilds}
}

// Diff lists how the image a Dockerfile makes differs from the daemonless build of s:
// entrypoint, command, user, environment, working directory, exposed ports, labels, the
// files and their sources and owners, and each Go binary's build flags and environment
// (static, for the target platform). Empty means they agree.
func Diff(s Spec, d *Dockerfile) []string {
	var out []string
	differ := func(what string, want, got any) {
		out = append(out, fmt.Sprintf("%s: daemonless build %v, %s %v", what, want, s.Dockerfile, got))
	}
	if !slices.Equal(s.Entrypoint, d.Spec.Entrypoint) {
		differ("entrypoint", s.Entrypoint, d.Spec.Entrypoint)
	}
	if !slices.Equal(s.Cmd, d.Spec.Cmd) {
		differ("cmd", s.Cmd, d.Spec.Cmd)
	}
	if s.User != d.Spec.User {
		differ("user", s.User, d.Spec.User)
	}
	if !slices.Equal(s.Env, d.Spec.Env) {
		differ("env", s.Env, d.Spec.Env)
	}
	if s.WorkingDir != d.Spec.WorkingDir {
		differ("working directory", s.WorkingDir, d.Spec.WorkingDir)
	}
	if !slices.Equal(sorted(s.ExposedPorts), sorted(d.Spec.ExposedPorts)) {
		differ("exposed ports", s.ExposedPorts, d.Spec.ExposedPorts)
	}
	for k, v := range s.Labels {
		if got, ok := d.Spec.Labels[k]; !ok || got != v {
			differ("label "+k, v, got)
		}
	}
	for k, v := range d.Spec.Labels {
		if _, ok := s.Labels[k]; !ok {
			differ("label "+k, "(none)", v)
		}
	}
	if len(s.Files) != len(d.Spec.Files) {
		differ("files", describeFiles(s.Files), describeFiles(d.Spec.Files))
		return out
	}
	for i, f := range s.Files {
		g := d.Spec.Files[i]
		if describeFile(f) != describeFile(g) {
			differ(fmt.Sprintf("file %d", i+1), describeFile(f), describeFile(g))
			continue
		}
		if f.Go != nil {
			out = append(out, diffGoBuild(s.Dockerfile, f, d.GoBuilds[g.Path])...)
		}
	}
	return out
}

func diffGoBuild(dockerfile string, f File, got DockerGoBuild) []string {
	var out []string
	// The daemonless build's flags: everything between "build" and "-o".
	args := f.Go.build("", v1.Platform{OS: "linux", Architecture: "amd64"}, "out").Args()
	want := args[1 : len(args)-3]
	if !slices.Equal(sorted(want), sorted(got.Flags)) {
		out = append(out, fmt.Sprintf("%s: go build flags: daemonless build %v, %s %v", f.Path, want, dockerfile, got.Flags))
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "amd64"} {
		if got.Env[k] != v {
			out = append(out, fmt.Sprintf("%s: go build with %s=%q in %s, want %q (static, for the target platform)", f.Path, k, got.Env[k], dockerfile, v))
		}
	}
	return out
}

func describeFiles(files []File) []string {
	out := make([]string, 0, len(files))
	for _, f := range files {
		out = append(out, describeFile(f))
	}
	return out
}

func describeFile(f File) string {
	var src string
	switch {
	case f.Context != "":
		src = "context " + path.Clean(f.Context)
	case f.Go != nil:
		src = fmt.Sprintf("go build of %s in %s (tags %v)", f.Go.Package, path.Clean(f.Go.Module), f.Go.Tags)
	case f.ServeCache != "":
		src = "serve cache of " + path.Clean(f.ServeCache)
	}
	return fmt.Sprintf("%s <- %s, owner %d:%d", path.Clean(f.Path), src, f.UID, f.GID)
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
