package olm_test

import (
	"testing"

	. "github.com/onsi/gomega"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"

	"github.com/phalanks/phalanks-operator/test/olm"
)

func TestPassed(t *testing.T) {
	for name, tc := range map[string]struct {
		results []scapiv1alpha3.TestResult
		err     string
	}{
		"every result passed": {results: []scapiv1alpha3.TestResult{{Name: "a", State: scapiv1alpha3.PassState}}},
		"a failed result fails the run": {
			results: []scapiv1alpha3.TestResult{{Name: "a", State: scapiv1alpha3.PassState}, {Name: "b", State: scapiv1alpha3.FailState, Errors: []string{"boom"}}},
			err:     "b: fail [boom]",
		},
		"an errored result fails the run": {results: []scapiv1alpha3.TestResult{{Name: "c", State: scapiv1alpha3.ErrorState}}, err: "c: error"},
		"no result fails the run":         {err: "no result"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			err := olm.Passed(scapiv1alpha3.TestStatus{Results: tc.results})
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			}
		})
	}
}
