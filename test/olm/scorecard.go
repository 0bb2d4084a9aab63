package olm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Scorecard runs a bundle's scorecard tests as `operator-sdk scorecard` runs them: the
// bundle, archived, in a ConfigMap; per test a pod whose init container unpacks the
// archive into an emptyDir mounted at /bundle and whose container runs the test's image
// and entrypoint with SCORECARD_NAMESPACE set; the container's log, decoded as a
// v1alpha3.TestStatus, is the result.
type Scorecard struct {
	Client kubernetes.Interface
	// Namespace holds the ConfigMap and the pods; ServiceAccount runs the pods.
	Namespace, ServiceAccount string
	// UntarImage is the image the init container runs tar from.
	UntarImage string
	// BundleDir is the bundle under test.
	BundleDir string

	configMap string
}

// scorecardConfig is where a bundle keeps its scorecard configuration.
const scorecardConfig = "tests/scorecard/config.yaml"

// ScorecardTests returns the tests of a bundle's scorecard configuration whose labels
// include every label of selector (`operator-sdk scorecard --selector`).
func ScorecardTests(bundleDir string, selector map[string]string) ([]scapiv1alpha3.TestConfiguration, error) {
	data, err := os.ReadFile(filepath.Join(bundleDir, scorecardConfig))
	if err != nil {
		return nil, err
	}
	var cfg scapiv1alpha3.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", scorecardConfig, err)
	}
	var out []scapiv1alpha3.TestConfiguration
	for _, stage := range cfg.Stages {
		for _, t := range stage.Tests {
			matches := true
			for k, v := range selector {
				matches = matches && t.Labels[k] == v
			}
			if matches {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

// Run runs one test in a pod and returns its status. A pod that fails to run, or a log
// that is not a TestStatus, is an error.
func (s *Scorecard) Run(ctx context.Context, test scapiv1alpha3.TestConfiguration, timeout time.Duration) (scapiv1alpha3.TestStatus, error) {
	if s.configMap == "" {
		if err := s.createConfigMap(ctx); err != nil {
			return scapiv1alpha3.TestStatus{}, err
		}
	}
	pod, err := s.Client.CoreV1().Pods(s.Namespace).Create(ctx, s.pod(test), metav1.CreateOptions{})
	if err != nil {
		return scapiv1alpha3.TestStatus{}, fmt.Errorf("create the pod of test %v: %w", test.Entrypoint, err)
	}
	var phase corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(s.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through transient errors
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		return scapiv1alpha3.TestStatus{}, fmt.Errorf("pod %s/%s of test %v did not finish in %s (phase %s)", s.Namespace, pod.Name, test.Entrypoint, timeout, phase)
	}
	log, err := s.Client.CoreV1().Pods(s.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "scorecard-test"}).DoRaw(ctx)
	if err != nil {
		return scapiv1alpha3.TestStatus{}, fmt.Errorf("log of pod %s/%s: %w", s.Namespace, pod.Name, err)
	}
	var status scapiv1alpha3.TestStatus
	if err := json.Unmarshal(log, &status); err != nil {
		return scapiv1alpha3.TestStatus{}, fmt.Errorf("the log of pod %s/%s (%s) is not a TestStatus: %w: %s", s.Namespace, pod.Name, phase, err, log)
	}
	return status, nil
}

// Passed returns nil when every result of status passed, and otherwise an error naming
// each result that did not, with its errors: what makes `operator-sdk scorecard` exit
// non-zero.
func Passed(status scapiv1alpha3.TestStatus) error {
	if len(status.Results) == 0 {
		return errors.New("the test reported no result")
	}
	var failed []string
	for _, r := range status.Results {
		if r.State != scapiv1alpha3.PassState {
			failed = append(failed, fmt.Sprintf("%s: %s %v", r.Name, r.State, r.Errors))
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

func (s *Scorecard) createConfigMap(ctx context.Context) error {
	archive, err := tarGzip(s.BundleDir)
	if err != nil {
		return err
	}
	cm, err := s.Client.CoreV1().ConfigMaps(s.Namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "scorecard-test-", Labels: map[string]string{"app": "scorecard-test"}},
		BinaryData: map[string][]byte{"bundle.tar.gz": archive},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the bundle ConfigMap: %w", err)
	}
	s.configMap = cm.Name
	return nil
}

// pod is the test pod as operator-sdk scorecard defines it.
func (s *Scorecard) pod(test scapiv1alpha3.TestConfiguration) *corev1.Pod {
	restricted := &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "scorecard-test-",
			Labels:       map[string]string{"app": "scorecard-test", "testrun": s.configMap},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: s.ServiceAccount,
			RestartPolicy:      corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      ptr.To[int64](1000),
				RunAsGroup:     ptr.To[int64](1000),
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name:            "scorecard-untar",
				Image:           s.UntarImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            []string{"tar", "xvzf", "/scorecard/bundle.tar.gz", "-C", "/scorecard-bundle"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "scorecard-bundle", MountPath: "/scorecard", ReadOnly: true},
					{Name: "scorecard-untar", MountPath: "/scorecard-bundle"},
				},
				SecurityContext: restricted,
			}},
			Containers: []corev1.Container{{
				Name:            "scorecard-test",
				Image:           test.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         test.Entrypoint,
				VolumeMounts:    []corev1.VolumeMount{{Name: "scorecard-untar", MountPath: "/bundle", ReadOnly: true}},
				Env: []corev1.EnvVar{{Name: "SCORECARD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"},
				}}},
				SecurityContext: restricted,
			}},
			Volumes: []corev1.Volume{
				{Name: "scorecard-bundle", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: s.configMap},
				}}},
				{Name: "scorecard-untar", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// tarGzip archives the contents of dir, paths relative to it.
func tarGzip(dir string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path) //nolint:gosec // G304: a file of the bundle under test
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
