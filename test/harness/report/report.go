// Package report repeats a Ginkgo suite's failures at the very end of its output. CI
// shows the tail of a long log, and Ginkgo's own summary names only each failed spec's
// location: the failure's message is far above it, among minutes of progress lines.
package report

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// maxMessage bounds each repeated message, so the tail stays readable.
const maxMessage = 4000

// FailuresLast registers the report with the suite; call it at the top level of a
// suite's test file: var _ = report.FailuresLast().
func FailuresLast() bool {
	return ginkgo.ReportAfterSuite("the failures, repeated at the end", func(r ginkgo.Report) {
		Write(os.Stdout, r)
	})
}

// Write writes what failed in r, if anything.
func Write(w io.Writer, r ginkgo.Report) {
	var b strings.Builder
	for _, s := range r.SpecReports {
		if !s.State.Is(types.SpecStateFailureStates) {
			continue
		}
		msg := s.Failure.Message
		if len(msg) > maxMessage {
			msg = msg[:maxMessage] + " …"
		}
		fmt.Fprintf(&b, "FAILED %s\n  at %s\n  %s\n", s.FullText(), s.Failure.Location, strings.ReplaceAll(msg, "\n", "\n  "))
	}
	if b.Len() > 0 {
		_, _ = fmt.Fprintf(w, "\n── the failures once more ──\n%s", b.String())
	}
}
