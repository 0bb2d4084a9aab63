package storagebucket_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

var _ = Describe("StorageBucket secrets", func() {
	It("never shows a secret value in logs, events or status", func() {
		ctx := context.Background()
		// A server of its own, so its key pair appears nowhere but in this spec's Secret.
		private := minio.StartForTest(GinkgoT(), minio.Options{})
		ns := namespace()
		sec := credentials(ns, "s3-credentials", private)
		const wrongSecret = "wrong-secret-value-7c1f9e"

		sb := newBucket(ns, "secretive", "secret-bucket", private)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte(wrongSecret)
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionFalse, "InvalidCredentials", 30*time.Second)
		Expect(k8s.Delete(ctx, sec)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionFalse, "SecretNotFound", 30*time.Second)

		// The checks below mean something only once the manager has logged: on a loaded
		// machine its log lines may come after the events.
		Eventually(logs.String).WithTimeout(time.Minute).ShouldNot(BeEmpty(), "the manager logs at debug level")
		var evs eventsv1.EventList
		Expect(k8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		Expect(evs.Items).NotTo(BeEmpty())
		eventYAML, err := yaml.Marshal(evs)
		Expect(err).NotTo(HaveOccurred())
		statusYAML, err := yaml.Marshal(get(sb).Status)
		Expect(err).NotTo(HaveOccurred())
		for what, text := range map[string]string{"the manager log": logs.String(), "events": string(eventYAML), "status": string(statusYAML)} {
			for _, value := range []string{private.SecretKey, private.AccessKey, wrongSecret} {
				Expect(strings.Contains(text, value)).To(BeFalse(), "%s contains a secret value", what)
			}
		}
		Expect(logs.String()).NotTo(BeEmpty(), "the manager logs at debug level")
	})
})
