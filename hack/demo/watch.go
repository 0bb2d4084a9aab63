package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/phalanks/phalanks-operator/test/harness/samples"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const refresh = 2 * time.Second

// watch shows the samples' status every refresh until Ctrl-C, or, in one-shot mode,
// until every sample reached its expected state or the timeout passed.
func (e *env) watch(ctx context.Context, samples []*unstructured.Unstructured, oneshot bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	interactive := !oneshot && isTerminal()
	lastReport := ""
	for {
		if err := e.manager.FailedEarly(); err != nil {
			return err
		}
		pending, report := e.evaluate(ctx, samples)
		if interactive {
			fmt.Print("\033[H\033[2J")
			fmt.Printf("phalanks-operator demo · %s · Ctrl-C to stop · KUBECONFIG=%s\n\n", time.Now().Format(time.TimeOnly), e.cluster.Kubeconfig)
			fmt.Println(e.kubectlGet(ctx, samples))
			fmt.Println(report)
		} else if report != lastReport {
			fmt.Println(report)
			lastReport = report
		}
		if oneshot && len(pending) == 0 {
			fmt.Println(e.kubectlGet(ctx, samples))
			step(fmt.Sprintf("all %d samples reached their expected state", len(samples)))
			return nil
		}
		if oneshot && time.Now().After(deadline) {
			fmt.Println(e.kubectlGet(ctx, samples))
			return fmt.Errorf("after %s these samples had not reached their expected state:\n  %s\nmanager log: %s",
				timeout, strings.Join(pending, "\n  "), e.manager.LogPath)
		}
		select {
		case <-ctx.Done():
			if oneshot {
				return ctx.Err()
			}
			return nil
		case <-time.After(refresh):
		}
	}
}

// evaluate checks every sample against the expectation of its kind.
func (e *env) evaluate(ctx context.Context, applied []*unstructured.Unstructured) (pending []string, report string) {
	var b strings.Builder
	b.WriteString("expected states:\n")
	for _, s := range applied {
		done, state := samples.Check(ctx, e.samplesEnv(), expectations, s)
		mark := "…"
		if done {
			mark = "✓"
		} else {
			pending = append(pending, describe(s)+": "+state)
		}
		fmt.Fprintf(&b, "  %s %-40s %s\n", mark, describe(s), state)
	}
	return pending, b.String()
}

func (e *env) kubectlGet(ctx context.Context, samples []*unstructured.Unstructured) string {
	kubectl, err := tools.Path("kubectl")
	if err != nil {
		return err.Error()
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", e.cluster.Kubeconfig,
		"get", kindsArg(samples)+",pods", "-n", demoNamespace, "-o", "wide")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("kubectl get: %v\n%s", err, out)
	}
	return string(out)
}

func isTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
