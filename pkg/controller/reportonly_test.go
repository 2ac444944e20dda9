package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// TestReportOnlyDetachKeepsTheVolumeListedWhileTheNodeUsesIt: node status is the
// only record of an iSCSI or Fibre Channel attachment. The informer shows node-a
// not using the attached volume, but kubelet has since reported it in use (and,
// as it was listed, mounted it) for a pod the informer has not shown yet. The
// detach the controller decides must not take the volume out of node-a's
// volumesAttached: the detach is called off once the node the API server returns
// says the volume is in use, but a controller that stops before it lists the
// volume again leaves no record of the attachment, and the next one may list a
// single-attach volume on a second node while node-a has it mounted. The API
// server here honours a resourceVersion in a patch as a precondition, as a real
// one does. Found by the simulation (rule 2 of internal/safetyrules).
func TestReportOnlyDetachKeepsTheVolumeListedWhileTheNodeUsesIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	iscsi := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	current := node("node-a", []volumename.UniqueName{iscsi}, []volumename.UniqueName{iscsi})
	current.ResourceVersion = "6"
	informed := node("node-a", []volumename.UniqueName{iscsi}, nil)
	informed.ResourceVersion = "5"

	client := fake.NewClientset(current)
	var mu sync.Mutex
	var applied [][]v1.AttachedVolume
	client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Status struct {
				VolumesAttached []v1.AttachedVolume `json:"volumesAttached"`
			} `json:"status"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		obj, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", p.GetName())
		if err != nil {
			return true, nil, err
		}
		if rv := body.Metadata.ResourceVersion; rv != "" && rv != obj.(*v1.Node).ResourceVersion {
			return true, nil, apierrors.NewConflict(v1.Resource("nodes"), p.GetName(), errors.New("the object has been modified"))
		}
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, body.Status.VolumesAttached)
		return false, nil, nil
	})
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(100), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	addToInformers(t, c, informed)
	c.onNode(nil, informed)
	c.actual.AddReportOnly(iscsi, "node-a", false)
	// A detach confirms node status through the updater's workers.
	go c.status.Run(ctx, 1)

	c.reconciler.Sync(ctx, iscsi)
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	if err := c.executor.Wait(waitCtx); err != nil {
		t.Fatalf("the detach did not end: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, list := range applied {
		if !slices.ContainsFunc(list, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(iscsi) }) {
			t.Errorf("a status patch of node-a left volumesAttached %v while the node reports %s in use: the only record of the attachment is gone", list, iscsi)
		}
	}
}
