package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodePod is a pod on a simulated node with its resolved volumes.
type nodePod struct {
	pod        *corev1.Pod
	vols       []Volume
	unresolved int
}

// syncPods plays kubelet's pod lifecycle for the pods on a node
// (KubeletOptions.ManagePods), given the volumes the node reports in use, and
// returns when the next deleted pod's containers stop with GracefulStop.
func (k *Kubelet) syncPods(ctx context.Context, node *corev1.Node, pods []nodePod, inUse map[string]bool, now time.Time) (stopAt time.Duration, err error) {
	needed := map[string]bool{}
	for _, p := range pods {
		for _, v := range p.vols {
			needed[v.Name] = needed[v.Name] || !PodTerminated(p.pod)
		}
	}
	for _, p := range pods {
		pod := p.pod
		switch {
		case pod.DeletionTimestamp == nil:
			if !PodTerminated(pod) && pod.Status.Phase != corev1.PodRunning && k.volumesMounted(node.Name, p) {
				if err := k.patchPodStatus(ctx, pod, runningStatus(pod, now)); err != nil {
					return 0, err
				}
			}
		case !PodTerminated(pod):
			if left := pod.DeletionTimestamp.Sub(now); k.opts.GracefulStop && left > 0 {
				stopAt = sooner(stopAt, left)
				continue
			}
			if err := k.patchPodStatus(ctx, pod, StoppedStatus(pod.Status, now)); err != nil {
				return 0, err
			}
		case !slices.ContainsFunc(p.vols, func(v Volume) bool { return inUse[v.Name] && !needed[v.Name] }):
			if err := k.deletePod(ctx, pod); err != nil {
				return 0, err
			}
		}
	}
	return stopAt, nil
}

// volumesMounted tells whether all of a pod's volumes are resolved and mounted,
// or belong to a driver that needs no attaching.
func (k *Kubelet) volumesMounted(node string, p nodePod) bool {
	if p.unresolved > 0 {
		return false
	}
	for _, v := range p.vols {
		if !k.opts.Mounts.Mounted(node, v.Name) {
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

// deletePod deletes a terminated pod's object once its volumes are unmounted.
func (k *Kubelet) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
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

// StoppedStatus returns a pod's status once every running container of it is
// terminated at now: not ready, in the same phase.
func StoppedStatus(status corev1.PodStatus, now time.Time) corev1.PodStatus {
	finished := metav1.NewTime(now)
	return corev1.PodStatus{
		Phase:                      status.Phase,
		Conditions:                 podConditions(corev1.ConditionFalse, finished),
		InitContainerStatuses:      stopped(status.InitContainerStatuses, finished),
		ContainerStatuses:          stopped(status.ContainerStatuses, finished),
		EphemeralContainerStatuses: stopped(status.EphemeralContainerStatuses, finished),
	}
}

// stopped returns the statuses with every running container terminated.
func stopped(statuses []corev1.ContainerStatus, finished metav1.Time) []corev1.ContainerStatus {
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
