package explain

import (
	"strings"
	"testing"
	"time"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in        string
		namespace string // "ns" if empty
		want      Target
		wantErr   bool
	}{
		{in: "pod/web-0", want: Target{Kind: Pod, Namespace: "ns", Name: "web-0"}},
		{in: "pods/web-0", want: Target{Kind: Pod, Namespace: "ns", Name: "web-0"}},
		{in: "pvc/data", want: Target{Kind: Claim, Namespace: "ns", Name: "data"}},
		{in: "persistentvolume/pv-1", want: Target{Kind: PV, Name: "pv-1"}},
		{in: "no/node-a", want: Target{Kind: Node, Name: "node-a"}},
		{in: "VolumeAttachment/csi-1", want: Target{Kind: VolumeAttachment, Name: "csi-1"}},
		{in: "web-0", wantErr: true},
		{in: "deployment/web", wantErr: true},
		{in: "pod/", wantErr: true},
		{in: "pod/a/b", wantErr: true},
		{in: "node/node-a", namespace: "not a namespace", want: Target{Kind: Node, Name: "node-a"}},
		{in: "pod/Web-0", wantErr: true},
		{in: "pv/..", wantErr: true},
		{in: "pod/web\x000", wantErr: true},
		{in: "pod/" + strings.Repeat("a", 254), wantErr: true},
		{in: "pod/web-0", namespace: "Not_A_Namespace", wantErr: true},
		{in: "pvc/data", namespace: "ns\x00", wantErr: true},
	}
	for _, tc := range tests {
		namespace := tc.namespace
		if namespace == "" {
			namespace = "ns"
		}
		got, err := ParseTarget(tc.in, namespace)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseTarget(%q, %q) = %+v, %v; want %+v, error %v", tc.in, namespace, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestEveryKindParsesFromItsOwnName(t *testing.T) {
	for _, k := range Kinds {
		if got, ok := ParseKind(string(k)); !ok || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, ok)
		}
		if want := k == Pod || k == Claim; k.Namespaced() != want {
			t.Errorf("%s.Namespaced() = %v, want %v", k, k.Namespaced(), want)
		}
	}
}

func TestWriteText(t *testing.T) {
	r := Report{
		Target:       Target{Kind: Pod, Namespace: "ns", Name: "web-1"},
		At:           time.Date(2026, 11, 23, 12, 4, 9, 0, time.UTC),
		Source:       "leader",
		DetachPolicy: "--max-wait-for-unmount=6m0s --max-wait-for-unmount-per-driver=careful.csi.example.com=never",
		Problems:     []Problem{{Pod: "ns/web-1", Volume: "cache", Reason: "claim ns/cache is not bound"}},
		Volumes: []Volume{{
			Name: "kubernetes.io/csi/d^h", Display: "pv-data",
			Nodes: []NodeReport{
				{Node: "node-a", Pods: []string{"ns/web-0"}, Attachments: []Attachment{{Name: "csi-1", Attached: true}},
					ListedAttached: true, ListedInUse: true, Action: "none", Reason: "attached"},
				{Node: "node-b", Pods: []string{"ns/web-1"}, Action: "wait", Reason: "a single-attach volume: held by node-a",
					Backoff: "the last attach failed: the next may start in 3s"},
			},
		}},
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `pod/web-1 -n ns, as the leader saw it at 12:04:09
detach policy: --max-wait-for-unmount=6m0s --max-wait-for-unmount-per-driver=careful.csi.example.com=never
  pod ns/web-1, volume cache: claim ns/cache is not bound

volume pv-data (kubernetes.io/csi/d^h), one node at a time
  node-a: needed by ns/web-0
    VolumeAttachment csi-1: attached
    node status: in volumesAttached, in volumesInUse
    ok: attached
  node-b: needed by ns/web-1
    node status: not in volumesAttached, not in volumesInUse
    waiting: a single-attach volume: held by node-a
    the last attach failed: the next may start in 3s
`
	if b.String() != want {
		t.Errorf("WriteText =\n%s\nwant\n%s", b.String(), want)
	}
}
