package scaling_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
)

// The operator's log fills most of this package's output, so a failure's message sits
// somewhere in the middle of thousands of lines, and CI shows the tail. The failures
// are printed once more at the very end (see run).
var failures failureLog

// failureLog collects each failed test's name and messages.
type failureLog struct {
	mu    sync.Mutex
	order []string
	msgs  map[string][]string
}

func (f *failureLog) add(name, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.msgs == nil {
		f.msgs = map[string][]string{}
	}
	if _, seen := f.msgs[name]; !seen {
		f.order = append(f.order, name)
	}
	if msg != "" {
		f.msgs[name] = append(f.msgs[name], msg)
	}
}

// noteFailed records t by name when it failed without a message recorded through
// expect (a t.Errorf of its own).
func (f *failureLog) noteFailed(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			f.add(t.Name(), "")
		}
	})
}

// print writes every failure, at most maxLines lines of each message, to w.
func (f *failureLog) print(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.order) == 0 {
		return
	}
	const maxLines = 40
	var b strings.Builder
	b.WriteString("\n── the failures once more ──\n")
	for _, name := range f.order {
		fmt.Fprintf(&b, "FAIL %s\n", name)
		if len(f.msgs[name]) == 0 {
			b.WriteString("  (its message is above, under --- FAIL)\n")
		}
		for _, msg := range f.msgs[name] {
			lines := strings.Split(strings.TrimSpace(msg), "\n")
			if len(lines) > maxLines {
				lines = append(lines[:maxLines], fmt.Sprintf("… %d more lines above, under --- FAIL", len(lines)-maxLines))
			}
			fmt.Fprintf(&b, "  %s\n", strings.Join(lines, "\n  "))
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// recordingT is a test whose Gomega failures are also recorded in failures.
type recordingT struct{ *testing.T }

func (r recordingT) Fatalf(format string, args ...any) {
	r.Helper()
	failures.add(r.Name(), fmt.Sprintf(format, args...))
	r.T.Fatalf(format, args...)
}

// expect is expect(t) with its failures recorded for the summary at the end.
func expect(t *testing.T) *WithT { return NewWithT(recordingT{t}) }
