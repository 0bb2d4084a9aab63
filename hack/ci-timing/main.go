// Command ci-timing runs CI, or any command, and reports where its time went: each tool
// set's build, each step of .ci/run, each test package and each end-to-end suite, beside
// the machine's speed on a fixed reference and its load while the command ran, so that
// runs on different machines can be compared.
//
//	go run ./hack/ci-timing                  # bash .ci/run, with the machine's caches
//	go run ./hack/ci-timing -cold            # the same from empty Go build, module and tool caches
//	go run ./hack/ci-timing -- make test     # any command
//
// The reference is the time to compile Go's standard library from an empty build cache
// (`go build std`): it needs no network, does the same work on every machine with the same
// Go, and is CPU-bound the way the tool builds are. A machine that takes twice as long on
// it takes about twice as long on every cold build.
//
// The command's output passes through unchanged; the whole of it, each line prefixed
// with the seconds since the start, also goes to -log. The report (a Markdown table) is
// printed at the end and written beside the log.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	cold := flag.Bool("cold", false, "run the command with empty Go build, module and tool caches (made in a temporary directory, removed afterwards)")
	keep := flag.Bool("keep", false, "with -cold, keep the temporary caches")
	logPath := flag.String("log", "bin/ci-timing.log", "where the command's timestamped output goes (the report goes to the same path with .md)")
	noRef := flag.Bool("no-reference", false, "skip the reference build")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		args = []string{"bash", ".ci/run"}
	}
	code, err := run(args, *cold, *keep, *noRef, *logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ci-timing:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

func run(args []string, cold, keep, noRef bool, logPath string) (int, error) {
	var r report
	r.command = args
	r.cpus = runtime.NumCPU()
	if !noRef {
		d, err := referenceBuild()
		if err != nil {
			return 2, err
		}
		r.reference = d
		fmt.Printf("ci-timing: reference: go build std from an empty build cache took %s\n", seconds(d))
	}

	env := os.Environ()
	if cold {
		dir, err := os.MkdirTemp("", "ci-timing-cold-")
		if err != nil {
			return 2, err
		}
		if !keep {
			defer removeAll(dir)
		}
		caches := map[string]string{
			"GOCACHE":              filepath.Join(dir, "gocache"),
			"GOMODCACHE":           filepath.Join(dir, "gomodcache"),
			"PHALANKS_TOOLS_CACHE": filepath.Join(dir, "tools"),
		}
		for k, v := range caches {
			env = append(env, k+"="+v)
		}
		r.cold = true
		fmt.Printf("ci-timing: cold run: GOCACHE, GOMODCACHE and PHALANKS_TOOLS_CACHE under %s\n", dir)
	}

	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		return 2, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return 2, err
	}
	defer func() { _ = logf.Close() }()

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin = os.Stdin
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw

	bg := backgroundLog(env)
	bgStart := fileSize(bg)
	load := startLoadSampler(5 * time.Second)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 2, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			at := time.Since(start)
			fmt.Println(line)
			_, _ = fmt.Fprintf(logf, "%6.0f %s\n", at.Seconds(), line)
			r.observe(at, line)
		}
	}()
	waitErr := cmd.Wait()
	_ = pw.Close()
	<-done
	r.total = time.Since(start)
	r.load = load.stop()
	r.observeBackground(readFrom(bg, bgStart))
	r.exit = cmd.ProcessState.ExitCode()

	out := r.markdown()
	fmt.Print("\n" + out)
	mdPath := logPath[:len(logPath)-len(filepath.Ext(logPath))] + ".md"
	if err := os.WriteFile(mdPath, []byte(out), 0o644); err != nil { //nolint:gosec // a report for people to read
		return r.exit, err
	}
	fmt.Printf("ci-timing: log %s, report %s\n", logPath, mdPath)
	if waitErr != nil && r.exit == 0 {
		return 2, waitErr
	}
	return r.exit, nil
}

// referenceBuild compiles the standard library into an empty build cache and returns how
// long it took.
func referenceBuild() (time.Duration, error) {
	dir, err := os.MkdirTemp("", "ci-timing-ref-")
	if err != nil {
		return 0, err
	}
	defer removeAll(dir)
	cmd := exec.Command("go", "build", "std")
	cmd.Env = append(os.Environ(), "GOCACHE="+dir, "GOFLAGS=")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("reference build (go build std): %w\n%s", err, out)
	}
	return time.Since(start), nil
}

// removeAll removes a directory that may hold the module cache, whose files and
// directories are read-only.
func removeAll(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755) //nolint:gosec // only to delete it
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// backgroundLog is where hack/tools/build.sh's background builds log (its cache's
// background.log), for the environment env.
func backgroundLog(env []string) string {
	get := func(k string) string {
		v := ""
		for _, e := range env {
			if rest, ok := strings.CutPrefix(e, k+"="); ok {
				v = rest
			}
		}
		return v
	}
	dir := get("PHALANKS_TOOLS_CACHE")
	if dir == "" {
		base := get("XDG_CACHE_HOME")
		if base == "" {
			base = filepath.Join(get("HOME"), ".cache")
		}
		dir = filepath.Join(base, "phalanks-operator", "tools")
	}
	return filepath.Join(dir, "background.log")
}

func fileSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// readFrom returns what path holds past offset.
func readFrom(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	return string(data[offset:])
}
