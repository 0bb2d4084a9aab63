package report

import (
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

func TestOnlyFailuresAreRepeatedWithTheirMessages(t *testing.T) {
	r := ginkgo.Report{SpecReports: types.SpecReports{
		{LeafNodeText: "passes", State: types.SpecStatePassed},
		{LeafNodeText: "fails", State: types.SpecStateFailed,
			Failure: types.Failure{Message: "bucket rw-03 was not probed for 21s", Location: types.CodeLocation{FileName: "chaos_test.go", LineNumber: 78}}},
		{LeafNodeText: "times out", State: types.SpecStateTimedout, Failure: types.Failure{Message: "timed out"}},
	}}
	var b strings.Builder
	Write(&b, r)
	out := b.String()
	for _, want := range []string{"FAILED fails", "chaos_test.go:78", "rw-03 was not probed for 21s", "FAILED times out"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "passes") {
		t.Errorf("a passed spec is repeated:\n%s", out)
	}

	b.Reset()
	Write(&b, ginkgo.Report{SpecReports: types.SpecReports{{LeafNodeText: "passes", State: types.SpecStatePassed}}})
	if b.Len() != 0 {
		t.Errorf("a suite without failures printed %q", b.String())
	}
}
