package storagebucket

import (
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// requestLogger names the StorageBucket in each reconcile's log with one key, where the
// default adds three. A reconcile runs for every probe, thousands per minute, and most
// log nothing: the key-values are attached lazily, only when a line is written (zap
// encodes them eagerly, which cost about 5 % of a probe's CPU).
func requestLogger(base logr.Logger) func(*reconcile.Request) logr.Logger {
	sink := base.GetSink()
	// The wrapper adds one frame to every line; the wrapped sink is told so once, here,
	// rather than once per reconcile (a zap logger copies itself to change it).
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return func(req *reconcile.Request) logr.Logger {
		if req == nil || sink == nil {
			return base
		}
		return logr.New(&lazySink{base: sink, request: req.NamespacedName})
	}
}

// lazySink holds the StorageBucket's name and key-values, and hands them to the sink it
// wraps only when a line is written at an enabled level (not even the key-value slice
// is made before that).
type lazySink struct {
	base    logr.LogSink
	request types.NamespacedName
	values  []any
}

// all returns the key-values: the StorageBucket, then those added.
func (s *lazySink) all() []any {
	return append([]any{"StorageBucket", klog.KRef(s.request.Namespace, s.request.Name)}, s.values...)
}

var (
	_ logr.LogSink          = (*lazySink)(nil)
	_ logr.CallDepthLogSink = (*lazySink)(nil)
)

// Init does nothing: the wrapped sink was initialized with its own logger already
// (initializing it again would skip that logger's frame twice), and requestLogger
// accounted for the frame this wrapper adds.
func (s *lazySink) Init(logr.RuntimeInfo) {}

func (s *lazySink) Enabled(level int) bool { return s.base.Enabled(level) }

func (s *lazySink) Info(level int, msg string, kv ...any) {
	s.base.WithValues(s.all()...).Info(level, msg, kv...)
}

func (s *lazySink) Error(err error, msg string, kv ...any) {
	s.base.WithValues(s.all()...).Error(err, msg, kv...)
}

func (s *lazySink) WithValues(kv ...any) logr.LogSink {
	return &lazySink{base: s.base, request: s.request, values: append(s.values[:len(s.values):len(s.values)], kv...)}
}

func (s *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{base: s.base.WithName(name), request: s.request, values: s.values}
}

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.base.(logr.CallDepthLogSink); ok {
		return &lazySink{base: cd.WithCallDepth(depth), request: s.request, values: s.values}
	}
	return s
}
