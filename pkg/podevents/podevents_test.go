package podevents

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

func TestWaitingForDetach(t *testing.T) {
	tests := []struct {
		name    string
		holders []cache.PodRef
		want    string
	}{
		{
			name:    "one pod in the same namespace",
			holders: []cache.PodRef{{Namespace: "team-a", Name: "db-0"}},
			want:    `Waiting for detach for volume "pv-1" Volume is already used by pod(s) db-0`,
		},
		{
			name:    "several pods in the same namespace",
			holders: []cache.PodRef{{Namespace: "team-a", Name: "db-0"}, {Namespace: "team-a", Name: "db-1"}},
			want:    `Waiting for detach for volume "pv-1" Volume is already used by pod(s) db-0, db-1`,
		},
		{
			name:    "only pods in other namespaces",
			holders: []cache.PodRef{{Namespace: "team-b", Name: "secret-0"}, {Namespace: "team-c", Name: "secret-1"}},
			want:    `Waiting for detach for volume "pv-1" Volume is already used by 2 pod(s) in different namespaces`,
		},
		{
			name: "pods in both",
			holders: []cache.PodRef{
				{Namespace: "team-b", Name: "secret-0"},
				{Namespace: "team-a", Name: "db-0"},
				{Namespace: "team-c", Name: "secret-1"},
			},
			want: `Waiting for detach for volume "pv-1" Volume is already used by pod(s) db-0 and 2 pod(s) in different namespaces`,
		},
		{
			name: "no pod holds it",
			want: `Waiting for detach for volume "pv-1" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := WaitingForDetach("pv-1", "team-a", tc.holders); got != tc.want {
				t.Errorf("WaitingForDetach() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestAttachMessages(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"succeeded", AttachSucceeded("pv-1"), `AttachVolume.Attach succeeded for volume "pv-1" `},
		{"failed", AttachFailed("pv-1", errors.New("rpc error: code = Internal desc = boom")),
			`AttachVolume.Attach failed for volume "pv-1" : rpc error: code = Internal desc = boom`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("message =\n%s\nwant\n%s", tc.got, tc.want)
			}
		})
	}
}

func TestReasons(t *testing.T) {
	if ReasonFailedAttach != "FailedAttachVolume" {
		t.Errorf("ReasonFailedAttach = %q", ReasonFailedAttach)
	}
	if ReasonSuccessfulAttach != "SuccessfulAttachVolume" {
		t.Errorf("ReasonSuccessfulAttach = %q", ReasonSuccessfulAttach)
	}
}

func TestEmitterSendsToEachPod(t *testing.T) {
	pods := []cache.PodRef{{Namespace: "a", Name: "p1", UID: "u1"}, {Namespace: "b", Name: "p2", UID: "u2"}}
	tests := []struct {
		name string
		emit func(*Emitter)
		want []string
	}{
		{
			name: "same message",
			emit: func(e *Emitter) {
				e.Emit(pods, v1.EventTypeNormal, ReasonSuccessfulAttach, AttachSucceeded("pv-1"))
			},
			want: []string{
				`Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1"  involvedObject{kind=Pod,apiVersion=v1}`,
				`Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1"  involvedObject{kind=Pod,apiVersion=v1}`,
			},
		},
		{
			name: "message per pod",
			emit: func(e *Emitter) {
				e.EmitEach(pods, v1.EventTypeWarning, ReasonFailedAttach, func(p cache.PodRef) string { return "for " + p.Key() })
			},
			want: []string{
				`Warning FailedAttachVolume for a/p1 involvedObject{kind=Pod,apiVersion=v1}`,
				`Warning FailedAttachVolume for b/p2 involvedObject{kind=Pod,apiVersion=v1}`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			recorder.IncludeObject = true
			tc.emit(NewEmitter(recorder))
			got := fakeevents.Drain(recorder)
			if len(got) != len(tc.want) {
				t.Fatalf("events = %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("event %d = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// podRecorder keeps the pods events were sent to.
type podRecorder struct {
	record.EventRecorder
	pods []*v1.Pod
}

func (r *podRecorder) Event(object runtime.Object, _, _, _ string) {
	r.pods = append(r.pods, object.(*v1.Pod))
}

func TestEmitterTargetsThePods(t *testing.T) {
	pods := []cache.PodRef{{Namespace: "a", Name: "p1", UID: "u1"}, {Namespace: "b", Name: "p2", UID: "u2"}}
	rec := &podRecorder{}
	NewEmitter(rec).Emit(pods, v1.EventTypeWarning, ReasonFailedAttach, "m")
	if len(rec.pods) != len(pods) {
		t.Fatalf("got %d events, want %d", len(rec.pods), len(pods))
	}
	for i, p := range pods {
		got := rec.pods[i]
		if got.Namespace != p.Namespace || got.Name != p.Name || got.UID != p.UID || got.Kind != "Pod" || got.APIVersion != "v1" {
			t.Errorf("event %d went to %s/%s uid %s kind %s/%s, want pod %s/%s uid %s",
				i, got.Namespace, got.Name, got.UID, got.APIVersion, got.Kind, p.Namespace, p.Name, p.UID)
		}
	}
}
