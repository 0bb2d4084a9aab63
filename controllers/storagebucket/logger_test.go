package storagebucket

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// countingSink counts the key-values attached to it, to show that a reconcile that
// logs nothing attaches none.
type countingSink struct {
	logr.LogSink
	withValues *int
}

// Init: the wrapped sink was initialized with its own logger already.
func (s countingSink) Init(logr.RuntimeInfo) {}

func (s countingSink) WithValues(kv ...any) logr.LogSink {
	*s.withValues++
	return countingSink{LogSink: s.LogSink.WithValues(kv...), withValues: s.withValues}
}

func (s countingSink) WithCallDepth(depth int) logr.LogSink {
	return countingSink{LogSink: s.LogSink.(logr.CallDepthLogSink).WithCallDepth(depth), withValues: s.withValues}
}

func TestRequestLoggerNamesTheBucketOnlyWhenALineIsWritten(t *testing.T) {
	var out bytes.Buffer
	var withValues int
	// The manager's logger (zap, JSON), with the caller.
	zl := zap.New(zap.WriteTo(&out), zap.RawZapOpts(uberzap.AddCaller()))
	base := logr.New(countingSink{LogSink: zl.GetSink(), withValues: &withValues})
	req := &reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: "sb"}}
	log := requestLogger(base)(req).WithValues("reconcileID", "1")
	log.V(1).Info("not written")
	if withValues != 0 || out.Len() != 0 {
		t.Fatalf("a reconcile that logs nothing attached %d key-value sets and wrote %q", withValues, out.String())
	}
	log.Info("written", "k", "v")
	line := out.String()
	for _, want := range []string{`"StorageBucket":{"name":"sb","namespace":"team"}`, `"reconcileID":"1"`, `"k":"v"`,
		`"caller":"storagebucket/logger_test.go:`} {
		if !strings.Contains(line, want) {
			t.Errorf("%s lacks %s", line, want)
		}
	}
	base.Info("direct")
	if direct := strings.Split(strings.TrimSpace(out.String()), "\n")[1]; !strings.Contains(direct, `"caller":"storagebucket/logger_test.go:`) {
		t.Errorf("the test's own oracle is wrong: %s", direct)
	}
}
