package storagebucket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// iamPolicy is an IAM policy document of docs/iam.
type iamPolicy struct {
	Version   string
	Statement []iamStatement
}

type iamStatement struct {
	Sid      string `json:",omitempty"`
	Effect   string
	Action   []string
	Resource []string
}

// readIAMPolicy reads docs/iam/<file> for one bucket.
func readIAMPolicy(file, bucket string) iamPolicy {
	GinkgoHelper()
	root, err := tools.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "docs", "iam", file))
	Expect(err).NotTo(HaveOccurred())
	Expect(string(data)).To(ContainSubstring("BUCKET_NAME"), "%s names the bucket BUCKET_NAME", file)
	var p iamPolicy
	Expect(json.Unmarshal([]byte(strings.ReplaceAll(string(data), "BUCKET_NAME", bucket)), &p)).To(Succeed())
	return p
}

// actions lists the policy's actions.
func (p iamPolicy) actions() []string {
	var out []string
	for _, s := range p.Statement {
		out = append(out, s.Action...)
	}
	return out
}

// without returns the policy without one action.
func (p iamPolicy) without(action string) iamPolicy {
	out := iamPolicy{Version: p.Version}
	for _, s := range p.Statement {
		s.Action = slices.DeleteFunc(slices.Clone(s.Action), func(a string) bool { return a == action })
		if len(s.Action) > 0 {
			out.Statement = append(out.Statement, s)
		}
	}
	return out
}

// sessionCredentials asks MinIO's STS for credentials limited to the policy (a session
// policy: MinIO's policy engine allows the session exactly what it allows).
func sessionCredentials(p iamPolicy) miniocreds.Value {
	GinkgoHelper()
	doc, err := json.Marshal(p)
	Expect(err).NotTo(HaveOccurred())
	sts, err := miniocreds.NewSTSAssumeRole(s3.URL, miniocreds.STSAssumeRoleOptions{
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Location: s3.Region, DurationSeconds: 3600, Policy: string(doc)})
	Expect(err).NotTo(HaveOccurred())
	v, err := sts.GetWithContext(&miniocreds.CredContext{Client: http.DefaultClient})
	Expect(err).NotTo(HaveOccurred())
	return v
}

// makeBucket creates a bucket on the suite's MinIO with its root credentials.
func makeBucket(name string) {
	GinkgoHelper()
	Expect(s3.MakeBucket(context.Background(), name, miniogo.MakeBucketOptions{})).To(Succeed())
}

// iamCase is one policy of docs/iam, and the StorageBuckets it is for.
type iamCase struct {
	// id names the case's buckets.
	id   string
	file string
	// base is the policy whose actions this one adds to; only the added actions are
	// taken away one at a time (the base's own case covers the others).
	base string
	// spec sets the StorageBucket up for the policy.
	spec func(sb *phalanksv1beta1.StorageBucket)
	// prepare readies the bucket, before the StorageBucket exists (existing) or after it
	// is Ready (populate).
	existing  func(bucket string)
	populate  func(bucket string)
	deletes   bool
	notNeeded []string
	// fails says, per action taken away, which condition shows it with which reason;
	// unnamed actions show in Ready (or, for a deleting case, Managed) as AccessDenied.
	fails map[string][2]string
}

var _ = Describe("The IAM policies of docs/iam, against MinIO's policy engine", Label("minio-only"), func() {
	DescribeTable("grant what the operator needs: with the policy it works, with any one action less it fails as documented",
		func(c iamCase) {
			ns := namespace()
			full := readIAMPolicy(c.file, "x")
			removable := full.actions()
			if c.base != "" {
				baseActions := readIAMPolicy(c.base, "x").actions()
				removable = slices.DeleteFunc(removable, func(a string) bool { return slices.Contains(baseActions, a) })
			}
			variants := append([]string{""}, removable...)
			buckets := map[string]*phalanksv1beta1.StorageBucket{}
			for i, missing := range variants {
				bucket := fmt.Sprintf("iam-%s-%d", c.id, i)
				policy := readIAMPolicy(c.file, bucket)
				if missing != "" {
					policy = policy.without(missing)
				}
				v := sessionCredentials(policy)
				create(&corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: bucket, Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
					StringData: map[string]string{"AWS_ACCESS_KEY_ID": v.AccessKeyID, "AWS_SECRET_ACCESS_KEY": v.SecretAccessKey, "AWS_SESSION_TOKEN": v.SessionToken},
				})
				if c.existing != nil {
					c.existing(bucket)
				}
				sb := newBucket(ns, bucket, bucket, s3)
				sb.Spec.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{Name: bucket, SessionTokenKey: "AWS_SESSION_TOKEN"}
				c.spec(sb)
				create(sb)
				buckets[missing] = sb
			}
			for _, a := range c.notNeeded {
				Expect(removable).To(ContainElement(a), "%s is not in %s", a, c.file)
			}
			DeferCleanup(func() {
				// Let go of what a missing action keeps from being deleted.
				for _, sb := range buckets {
					got := &phalanksv1beta1.StorageBucket{}
					if k8s.Get(context.Background(), client.ObjectKeyFromObject(sb), got) == nil && len(got.Finalizers) > 0 {
						base := got.DeepCopy()
						got.Spec.DeletionPolicy = phalanksv1beta1.DeletionRetain
						_ = k8s.Patch(context.Background(), got, client.MergeFrom(base))
					}
				}
			})
			observed := func(missing string) string {
				got := &phalanksv1beta1.StorageBucket{}
				if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(buckets[missing]), got); err != nil {
					return err.Error()
				}
				var out []string
				for _, cond := range got.Status.Conditions {
					out = append(out, fmt.Sprintf("%s=%s/%s", cond.Type, cond.Status, cond.Reason))
				}
				return strings.Join(out, " ")
			}
			// works reports whether the StorageBucket did what the case asks of it.
			works := func(missing string) {
				GinkgoHelper()
				sb := buckets[missing]
				if c.deletes {
					eventuallyGone(sb)
					Expect(bucketExists(s3, sb.Spec.BucketName)).To(BeFalse(), "bucket %s", sb.Spec.BucketName)
					return
				}
				eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
			}
			if c.deletes {
				for _, missing := range variants {
					eventuallyReady(buckets[missing], metav1.ConditionTrue, "BucketReady", 30*time.Second)
					if c.populate != nil {
						c.populate(buckets[missing].Spec.BucketName)
					}
					Expect(k8s.Delete(context.Background(), buckets[missing])).To(Succeed())
				}
			}
			By("working with the whole policy")
			works("")
			for _, missing := range removable {
				if slices.Contains(c.notNeeded, missing) {
					By("working without " + missing + ", which MinIO does not ask for here")
					works(missing)
					continue
				}
				want, ok := c.fails[missing]
				if !ok {
					want = [2]string{phalanksv1beta1.ConditionReady, "AccessDenied"}
					if c.deletes {
						want[0] = phalanksv1beta1.ConditionManaged
					}
				}
				By(fmt.Sprintf("failing without %s: %s %s", missing, want[0], want[1]))
				Eventually(func() string { return condition(get(buckets[missing]), want[0]).Reason }).
					WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Equal(want[1]), "without %s: %s", missing, observed(missing))
				if c.deletes {
					Expect(bucketExists(s3, buckets[missing].Spec.BucketName)).To(BeTrue(), "without %s the bucket is deleted anyway", missing)
				}
			}
		},
		Entry("observe.json, HeadBucket", iamCase{id: "head", file: "observe.json",
			spec:     func(*phalanksv1beta1.StorageBucket) {},
			existing: makeBucket}),
		Entry("observe.json, List", iamCase{id: "list", file: "observe.json",
			spec:     func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeList },
			existing: makeBucket}),
		// Without s3:GetBucketObjectLockConfiguration it writes no canary and lists
		// instead, which this policy does not allow either.
		Entry("observe-readwrite.json, an unversioned bucket", iamCase{id: "rw", file: "observe-readwrite.json",
			notNeeded: []string{"s3:DeleteObjectVersion"},
			spec:      func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite },
			existing:  makeBucket}),
		Entry("observe-readwrite.json, a versioned bucket", iamCase{id: "rwv", file: "observe-readwrite.json",
			spec: func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite },
			existing: func(b string) {
				makeBucket(b)
				c, err := s3.Client()
				Expect(err).NotTo(HaveOccurred())
				Expect(c.EnableVersioning(context.Background(), b)).To(Succeed())
			}}),
		// A bucket it creates it tags at once: it reads the tags of buckets it did not
		// create, below.
		Entry("manage.json, creating the bucket", iamCase{id: "create", file: "manage.json",
			notNeeded: []string{"s3:GetBucketTagging"},
			fails:     map[string][2]string{"s3:CreateBucket": {phalanksv1beta1.ConditionManaged, "AccessDenied"}},
			spec:      func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage }}),
		Entry("manage.json, adopting a bucket", iamCase{id: "adopt", file: "manage.json",
			notNeeded: []string{"s3:CreateBucket"},
			spec: func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
				sb.Annotations = map[string]string{phalanksv1beta1.AnnotationAdopt: "true"}
			},
			existing: makeBucket}),
		// MinIO authorizes ListObjectVersions with s3:ListBucket; AWS asks for
		// s3:ListBucketVersions.
		Entry("manage-delete.json", iamCase{id: "delete", file: "manage-delete.json", base: "manage.json", deletes: true,
			notNeeded: []string{"s3:ListBucketVersions"},
			spec: func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
				sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
			}}),
		// MinIO lists no incomplete upload without the object's name and deletes a bucket
		// with uploads in progress: the two multipart actions are for AWS S3.
		Entry("manage-delete-force-empty.json", iamCase{id: "force", file: "manage-delete-force-empty.json", base: "manage.json", deletes: true,
			notNeeded: []string{"s3:ListBucketVersions", "s3:ListBucketMultipartUploads", "s3:AbortMultipartUpload"},
			spec: func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
				sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
				sb.Spec.NonEmptyStrategy = phalanksv1beta1.NonEmptyForceEmpty
			},
			populate: func(b string) {
				c, err := s3.Client()
				Expect(err).NotTo(HaveOccurred())
				Expect(c.EnableVersioning(context.Background(), b)).To(Succeed())
				putObject(s3, b, "a")
				putObject(s3, b, "a")
				core := miniogo.Core{Client: c}
				_, err = core.NewMultipartUpload(context.Background(), b, "upload", miniogo.PutObjectOptions{})
				Expect(err).NotTo(HaveOccurred())
			}}),
	)
})
