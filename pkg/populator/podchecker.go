package populator

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// PodChecker tells whether a node's pods need a volume, from the pods as the API
// server lists them rather than as the pod informer shows them: the executor asks
// it before a forced detach, which a pod just scheduled to the node and not yet
// shown by the informer must be able to stop.
type PodChecker struct {
	Client    kubernetes.Interface
	Populator *Populator
}

// NeededOnNode lists the node's pods from the API server and tells whether one
// of them needs the volume (PodNeeds).
func (c PodChecker) NeededOnNode(ctx context.Context, volume volumename.UniqueName, node string) (bool, error) {
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return false, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	return slices.ContainsFunc(pods.Items, func(pod v1.Pod) bool {
		return pod.Spec.NodeName == node && c.Populator.PodNeeds(ctx, &pod, volume)
	}), nil
}
