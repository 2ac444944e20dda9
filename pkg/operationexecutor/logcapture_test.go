package operationexecutor

import (
	"context"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// loggingContext returns the test's context with a logger that keeps, up to
// verbosity 2, what it is given, and a function that returns the messages
// logged so far, by kind ("INFO" or "ERROR").
func loggingContext(t *testing.T) (context.Context, func() map[ktesting.LogType][]string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	return klog.NewContext(t.Context(), logger), func() map[ktesting.LogType][]string {
		out := make(map[ktesting.LogType][]string)
		for _, e := range buffer.Data() {
			out[e.Type] = append(out[e.Type], e.Message)
		}
		return out
	}
}
