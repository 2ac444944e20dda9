package populator_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
)

// Before a forced detach, the node's pods are read from the API server: a pod the
// informer has not shown yet still keeps the volume.
func TestNeededOnNodeReadsTheAPIServer(t *testing.T) {
	claim := boundClaim("data", "pv-1")
	w := newWorld(t, claim, csiPV("pv-1", "h-1", claim))
	client := fake.NewClientset()
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), runningPod("db", claimVolume("v", "data")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checker := populator.PodChecker{Client: client, Populator: w.pop}
	vol := pvVolume("pv-1", "h-1", false).Name
	for n, want := range map[string]bool{node: true, "node-2": false} {
		got, err := checker.NeededOnNode(t.Context(), vol, n)
		if err != nil || got != want {
			t.Errorf("NeededOnNode(%s) = %v, %v, want %v", n, got, err, want)
		}
	}
}
