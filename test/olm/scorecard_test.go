package olm_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/phalanks/phalanks-operator/test/olm"
)

const (
	scorecardNamespace = "scorecard"
	// scorecardTimeout bounds one test pod: pulling, unpacking, and the test's own waits
	// on the operator.
	scorecardTimeout = 5 * time.Minute
)

// itRunsTheCustomScorecardTests runs the installed release's custom scorecard tests
// (`operator-sdk scorecard --selector=suite=custom`) as pods on the node, and checks that
// a test that fails fails the run. The built-in tests read only the bundle and run
// offline in make test (hack/olm).
func itRunsTheCustomScorecardTests() {
	It("runs the bundle's custom scorecard tests as pods, the way operator-sdk scorecard does, and every one passes", func() {
		tests, err := olm.ScorecardTests(current.BundleDir, map[string]string{"suite": "custom"})
		check(err)
		Expect(tests).NotTo(BeEmpty(), "the bundle's scorecard configuration has custom tests")
		sc := scorecardRunner()
		for _, t := range tests {
			Expect(t.Image).To(Equal(current.ScorecardImage), "the test runs the release's scorecard-test image")
			By("running " + t.Labels["test"])
			status, err := sc.Run(ctx, t, scorecardTimeout)
			check(err)
			Expect(olm.Passed(status)).To(Succeed(), "scorecard test %s", t.Labels["test"])
		}

		By("failing the run when a test fails")
		broken := tests[0]
		broken.Entrypoint = []string{broken.Entrypoint[0], "no-such-test"}
		status, err := sc.Run(ctx, broken, scorecardTimeout)
		check(err)
		Expect(status.Results).NotTo(BeEmpty())
		Expect(status.Results[0].State).NotTo(Equal(scapiv1alpha3.PassState))
		Expect(olm.Passed(status)).To(MatchError(ContainSubstring("no-such-test")))
	})
}

// scorecardRunner sets up the namespace and service account the tests run as, with what
// the tests need (scorecard runs them with a service account the user grants that).
func scorecardRunner() *olm.Scorecard {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scorecardNamespace}})).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scorecard", Namespace: scorecardNamespace}})).To(Succeed())
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: scorecardNamespace, Name: "scorecard"}}
	Expect(k8s.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "phalanks-scorecard-tests"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list"}}},
	})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "phalanks-scorecard-tests"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "phalanks-scorecard-tests"},
		Subjects:   subject,
	})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "phalanks-scorecard-tests", Namespace: scorecardNamespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"phalanks.io"}, Resources: []string{"foos", "storagebuckets"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}},
		},
	})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "phalanks-scorecard-tests", Namespace: scorecardNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "phalanks-scorecard-tests"},
		Subjects:   subject,
	})).To(Succeed())
	return &olm.Scorecard{Client: cs, Namespace: scorecardNamespace, ServiceAccount: "scorecard", UntarImage: untarImage, BundleDir: current.BundleDir}
}
