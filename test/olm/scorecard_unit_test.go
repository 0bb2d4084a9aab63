package olm_test

import (
	"testing"

	. "github.com/onsi/gomega"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"

	"github.com/phalanks/phalanks-operator/test/olm"
)

func TestFailures(t *testing.T) {
	test := func(results ...scapiv1alpha3.TestResult) scapiv1alpha3.Test {
		return scapiv1alpha3.Test{
			Spec:   scapiv1alpha3.TestConfiguration{Entrypoint: []string{"scorecard-test", "x"}},
			Status: scapiv1alpha3.TestStatus{Results: results},
		}
	}
	for name, tc := range map[string]struct {
		tests []scapiv1alpha3.Test
		want  []string
	}{
		"every result passed": {tests: []scapiv1alpha3.Test{test(scapiv1alpha3.TestResult{Name: "a", State: scapiv1alpha3.PassState})}},
		"a failed result is listed with its errors": {
			tests: []scapiv1alpha3.Test{test(
				scapiv1alpha3.TestResult{Name: "a", State: scapiv1alpha3.PassState},
				scapiv1alpha3.TestResult{Name: "b", State: scapiv1alpha3.FailState, Errors: []string{"boom"}})},
			want: []string{"b: fail [boom]"},
		},
		"an errored result is listed": {
			tests: []scapiv1alpha3.Test{test(scapiv1alpha3.TestResult{Name: "c", State: scapiv1alpha3.ErrorState})},
			want:  []string{"c: error []"},
		},
		"a test without result is listed": {tests: []scapiv1alpha3.Test{test()}, want: []string{"[scorecard-test x]: no result"}},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(olm.Failures(scapiv1alpha3.TestList{Items: tc.tests})).To(Equal(tc.want))
		})
	}
}
