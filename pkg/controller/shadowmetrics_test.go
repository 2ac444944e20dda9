package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/shadow"
)

// TestShadowComparisonsStartAtZero: a controller in shadow mode exports an
// agreement and a disagreement series for every expectation before it compares
// anything (metrics.ExportShadowComparisons starts them at 0); one that acts
// exports none.
func TestShadowComparisonsStartAtZero(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shadow bool
		want   int
	}{
		{name: "shadow", shadow: true, want: 2 * len(shadow.Expectations)},
		{name: "acting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			m := metrics.New()
			opts := DefaultOptions()
			opts.Shadow = tc.shadow
			if _, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(1), m, opts); err != nil {
				t.Fatal(err)
			}
			if got := testutil.CollectAndCount(m.ShadowComparisons); got != tc.want {
				t.Errorf("%d shadow_comparisons_total series, want %d", got, tc.want)
			}
		})
	}
}
