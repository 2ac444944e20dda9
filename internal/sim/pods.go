package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodePod is a pod on a simulated node with its resolved volumes.
type nodePod struct {
	pod        *corev1.Pod
	vols       []podVolume
	unresolved int
}

// syncPods plays kubelet's pod lifecycle for the pods on a node (KubeletOptions.ManagePods).
func (k *Kubelet) syncPods(ctx context.Context, node *corev1.Node, pods []nodePod, now time.Time) error {
	attached, inUse := map[string]bool{}, map[string]bool{}
	for _, av := range node.Status.VolumesAttached {
		attached[string(av.Name)] = true
	}
	for _, vol := range node.Status.VolumesInUse {
		inUse[string(vol)] = true
	}
	for _, p := range pods {
		pod := p.pod
		switch {
		case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
			continue
		case pod.DeletionTimestamp != nil && !podTerminated(pod):
			if err := k.patchPodStatus(ctx, pod, stoppedStatus(pod, now)); err != nil {
				return err
			}
		case pod.DeletionTimestamp != nil:
			if err := k.finishDeletion(ctx, node.Name, p, now); err != nil {
				return err
			}
		case pod.Status.Phase != corev1.PodRunning && k.volumesReady(p, attached, inUse):
			if err := k.patchPodStatus(ctx, pod, runningStatus(pod, now)); err != nil {
				return err
			}
		}
	}
	return nil
}

// volumesReady tells whether all of a pod's volumes are resolved, and attached and
// reported in use by the node's status, or belong to a driver that needs no
// attaching: kubelet mounts a volume only once a node status write of its own has
// listed it in volumesInUse (TestKubeletMountsOnlyAttached in test/e2e).
func (k *Kubelet) volumesReady(p nodePod, attached, inUse map[string]bool) bool {
	if p.unresolved > 0 {
		return false
	}
	for _, v := range p.vols {
		if (!attached[v.uniqueName()] || !inUse[v.uniqueName()]) && (v.driver == "" || k.attachRequired(v.driver)) {
			return false
		}
	}
	return true
}

func (k *Kubelet) attachRequired(driver string) bool {
	d, err := k.csiDrivers.Get(driver)
	if err != nil || d.Spec.AttachRequired == nil {
		return true
	}
	return *d.Spec.AttachRequired
}

// finishDeletion deletes a terminated pod's object once its volumes are unmounted:
// UnmountDelay after it terminated, and none of them stuck.
func (k *Kubelet) finishDeletion(ctx context.Context, node string, p nodePod, now time.Time) error {
	k.mu.Lock()
	terminated, ok := k.podsTerminated[p.pod.UID]
	if !ok {
		terminated = now
		k.podsTerminated[p.pod.UID] = now
	}
	st := k.state[node]
	stuck := false
	for _, v := range p.vols {
		stuck = stuck || st.stuck[v.uniqueName()]
	}
	k.mu.Unlock()
	if stuck {
		return nil
	}
	if left := terminated.Add(k.opts.UnmountDelay).Sub(now); left > 0 {
		k.queue.AddAfter(node, left)
		return nil
	}
	uid := p.pod.UID
	err := k.client.CoreV1().Pods(p.pod.Namespace).Delete(ctx, p.pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", p.pod.Namespace, p.pod.Name, err)
	}
	k.mu.Lock()
	delete(k.podsTerminated, uid)
	k.mu.Unlock()
	return nil
}

func (k *Kubelet) patchPodStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return fmt.Errorf("encoding status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = k.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func runningStatus(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	started := metav1.NewTime(now)
	status := corev1.PodStatus{
		Phase:      corev1.PodRunning,
		StartTime:  &started,
		Conditions: podConditions(corev1.ConditionTrue, started),
	}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     "sim://" + c.Image,
			ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			Ready:       true,
			Started:     new(bool(true)),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	return status
}

func stoppedStatus(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	finished := metav1.NewTime(now)
	return corev1.PodStatus{
		Conditions:                 podConditions(corev1.ConditionFalse, finished),
		InitContainerStatuses:      stopContainers(pod.Status.InitContainerStatuses, finished),
		ContainerStatuses:          stopContainers(pod.Status.ContainerStatuses, finished),
		EphemeralContainerStatuses: stopContainers(pod.Status.EphemeralContainerStatuses, finished),
	}
}

// stopContainers returns the statuses with every running container terminated.
func stopContainers(statuses []corev1.ContainerStatus, finished metav1.Time) []corev1.ContainerStatus {
	var stopped []corev1.ContainerStatus
	for _, s := range statuses {
		if s.State.Running != nil {
			s.Ready = false
			s.Started = new(false)
			s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason:      "Completed",
				StartedAt:   s.State.Running.StartedAt,
				FinishedAt:  finished,
				ContainerID: s.ContainerID,
			}}
		}
		stopped = append(stopped, s)
	}
	return stopped
}

func podConditions(status corev1.ConditionStatus, at metav1.Time) []corev1.PodCondition {
	var conds []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		conds = append(conds, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: at})
	}
	return conds
}
