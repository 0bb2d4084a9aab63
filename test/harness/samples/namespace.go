package samples

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Namespace returns a namespace named name that enforces the restricted Pod Security
// level at the API server's own version, as a platform team's tenant namespaces do. The
// samples go there, so that a sample whose pods the level refuses (a Foo's Deployment,
// the scheduled-scaling workload) never reaches its state.
func Namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		},
	}}
}
