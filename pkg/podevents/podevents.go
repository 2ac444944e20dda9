// Package podevents words the events the controller puts on pods, exactly as
// kube-controller-manager words them so that `kubectl describe pod` and
// `kubectl events` read the same, and sends them.
package podevents

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// Event reasons.
const (
	ReasonFailedAttach     = "FailedAttachVolume"
	ReasonSuccessfulAttach = "SuccessfulAttachVolume"
)

// Component is the event source shown as "From" by kubectl.
const Component = "attachdetach-controller"

// AttachSucceeded is the message of a SuccessfulAttachVolume event. Like
// kube-controller-manager's, it ends with a space.
func AttachSucceeded(volume string) string {
	return fmt.Sprintf("AttachVolume.Attach succeeded for volume %q ", volume)
}

// AttachFailed is the message of a FailedAttachVolume event for a failed attach.
func AttachFailed(volume string, err error) string {
	return fmt.Sprintf("AttachVolume.Attach failed for volume %q : %v", volume, err)
}

// WaitingForDetach is the message of the FailedAttachVolume event a pod gets when
// its single-attach volume is held by another node. holders are the pods that use
// the volume on the nodes holding it; only those in the pod's own namespace are
// named.
func WaitingForDetach(volume, podNamespace string, holders []cache.PodRef) string {
	prefix := fmt.Sprintf("Waiting for detach for volume %q ", volume)
	var names []string
	others := 0
	for _, p := range holders {
		if p.Namespace == podNamespace {
			names = append(names, p.Name)
		} else {
			others++
		}
	}
	switch {
	case len(names) > 0 && others > 0:
		return prefix + fmt.Sprintf("Volume is already used by pod(s) %s and %d pod(s) in different namespaces", strings.Join(names, ", "), others)
	case len(names) > 0:
		return prefix + "Volume is already used by pod(s) " + strings.Join(names, ", ")
	case others > 0:
		return prefix + fmt.Sprintf("Volume is already used by %d pod(s) in different namespaces", others)
	default:
		return prefix + "Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node"
	}
}

// Emitter sends events to pods.
type Emitter struct {
	recorder record.EventRecorder
}

// NewEmitter returns an Emitter that sends through the recorder.
func NewEmitter(recorder record.EventRecorder) *Emitter {
	return &Emitter{recorder: recorder}
}

// Emit sends the event to each pod.
func (e *Emitter) Emit(pods []cache.PodRef, eventType, reason, message string) {
	for _, p := range pods {
		e.recorder.Event(podObject(p), eventType, reason, message)
	}
}

// EmitEach sends each pod the event with the message made for it.
func (e *Emitter) EmitEach(pods []cache.PodRef, eventType, reason string, message func(cache.PodRef) string) {
	for _, p := range pods {
		e.recorder.Event(podObject(p), eventType, reason, message(p))
	}
}

func podObject(p cache.PodRef) *v1.Pod {
	return &v1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID},
	}
}
