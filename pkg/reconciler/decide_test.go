package reconciler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

func TestUnmountPolicyFor(t *testing.T) {
	policy := UnmountPolicy{
		Default: DriverUnmountPolicy{MaxWait: 6 * time.Minute},
		PerDriver: map[string]DriverUnmountPolicy{
			"fast.csi.example.com": {MaxWait: 30 * time.Second},
			"kubernetes.io/iscsi":  {NeverForce: true},
		},
	}
	tests := []struct {
		name       string
		policy     UnmountPolicy
		volume     volumename.UniqueName
		want       DriverUnmountPolicy
		wantDriver string
	}{
		{"driver with a policy", policy, volumename.CSI("fast.csi.example.com", "v^1"), DriverUnmountPolicy{MaxWait: 30 * time.Second}, "fast.csi.example.com"},
		{"driver without one", policy, volumename.CSI("slow.csi.example.com", "v"), DriverUnmountPolicy{MaxWait: 6 * time.Minute}, ""},
		{"in-tree plugin", policy, volumename.ISCSI("10.0.0.1:3260", "iqn.x", 0), DriverUnmountPolicy{NeverForce: true}, "kubernetes.io/iscsi"},
		{"force detach off for all", UnmountPolicy{Default: policy.Default, PerDriver: policy.PerDriver, NeverForce: true},
			volumename.CSI("fast.csi.example.com", "v"), DriverUnmountPolicy{MaxWait: 30 * time.Second, NeverForce: true}, "fast.csi.example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, driver := tc.policy.For(tc.volume)
			if got != tc.want || driver != tc.wantDriver {
				t.Errorf("For(%s) = %+v, %q; want %+v, %q", tc.volume, got, driver, tc.want, tc.wantDriver)
			}
		})
	}
}

func TestDriverUnmountPolicyReadsAsNeverWhenForceDetachIsOff(t *testing.T) {
	tests := []struct {
		policy DriverUnmountPolicy
		want   string
	}{
		{DriverUnmountPolicy{MaxWait: 6 * time.Minute}, "6m0s"},
		{DriverUnmountPolicy{MaxWait: 6 * time.Minute, NeverForce: true}, "never"},
		{DriverUnmountPolicy{NeverForce: true}, "never"},
	}
	for _, tc := range tests {
		if got := tc.policy.String(); got != tc.want {
			t.Errorf("%+v reads %q, want %q", tc.policy, got, tc.want)
		}
	}
}

// TestDecisionReasons pins the words an operator reads for each decision.
func TestDecisionReasons(t *testing.T) {
	start := time.Date(2026, 11, 23, 12, 1, 7, 0, time.UTC)
	vol := volumename.CSI("d", "h")
	mounted := cache.Node{Name: "node-a", Presence: cache.NodePresent, Managed: true, Ready: true, InUse: map[volumename.UniqueName]struct{}{vol: {}}}
	notReady := mounted
	notReady.Ready = false
	tainted := notReady
	tainted.OutOfService = true
	shut := notReady
	shut.Shutdown = true
	attached := cache.OnNode{Volume: vol, Node: "node-a", Objects: []cache.Attachment{{Attached: true}}}
	deleting := cache.OnNode{Volume: vol, Node: "node-a", Objects: []cache.Attachment{{Deleting: true, DetachError: "device busy"}}}
	tests := []struct {
		name string
		cfg  Config
		on   cache.OnNode
		node cache.Node
		now  time.Time
		// startUnknown: a snapshot, which cannot know when the wait began.
		startUnknown bool
		wantAction   Action
		wantForce    cache.ForceRule
		wantReason   string
	}{
		{name: "waiting, node NotReady", on: attached, node: notReady, now: start.Add(3*time.Minute + 2*time.Second), wantAction: ActionWait,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; node-a is NotReady; force detach at 12:07:07 if it is not Ready then, in 2m58s"},
		{name: "wait over, node Ready", on: attached, node: mounted, now: start.Add(7 * time.Minute), wantAction: ActionWait,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; the 6m0s wait is over but node-a is Ready, so it is not force-detached"},
		{name: "wait over, node NotReady", on: attached, node: notReady, now: start.Add(6 * time.Minute), wantAction: ActionDetach, wantForce: cache.ForcedOnTimeout,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; the 6m0s wait is over and node-a is NotReady: force-detached"},
		{name: "wait over, node NotReady, pod informer not watching", cfg: Config{Pods: podView{}}, on: attached, node: notReady, now: start.Add(time.Hour), wantAction: ActionWait,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; the pod informer's watch failed and it has not watched again: pods it does not show may need the volume, so the wait for unmount is not over before it does, and counts from its next list if it lists again"},
		{name: "wait counted from the end of the pod informer's gap", cfg: Config{Pods: podView{watching: true, since: start.Add(5 * time.Minute)}}, on: attached, node: notReady, now: start.Add(6 * time.Minute), wantAction: ActionWait,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; node-a is NotReady; force detach at 12:12:07 if it is not Ready then, in 5m0s"},
		{name: "wait over since the end of the pod informer's gap", cfg: Config{Pods: podView{watching: true, since: start.Add(5 * time.Minute)}}, on: attached, node: notReady, now: start.Add(11 * time.Minute), wantAction: ActionDetach, wantForce: cache.ForcedOnTimeout,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; the 6m0s wait is over and node-a is NotReady: force-detached"},
		{name: "a gap that ended before the wait began", cfg: Config{Pods: podView{watching: true, since: start.Add(-time.Hour)}}, on: attached, node: notReady, now: start.Add(6 * time.Minute), wantAction: ActionDetach, wantForce: cache.ForcedOnTimeout,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; the 6m0s wait is over and node-a is NotReady: force-detached"},
		{name: "snapshot, wait start unknown", on: attached, node: notReady, now: start.Add(time.Hour), startUnknown: true, wantAction: ActionWait,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it; node-a is NotReady; force detach 6m0s after the wait began if it is not Ready then (when the wait began is known only to the leader: --from-leader)"},
		{name: "driver policy never", cfg: Config{UnmountPolicy: UnmountPolicy{Default: DriverUnmountPolicy{MaxWait: 6 * time.Minute}, PerDriver: map[string]DriverUnmountPolicy{"d": {NeverForce: true}}}},
			on: attached, node: notReady, now: start.Add(time.Hour), wantAction: ActionWait,
			wantReason: "mounted on node-a (volumesInUse); waiting for kubelet to unmount it since 12:01:07; force detach on timeout is off (policy of d)"},
		{name: "out of service", on: attached, node: tainted, now: start, wantAction: ActionDetach, wantForce: cache.ForcedOutOfService,
			wantReason: "node node-a has the node.kubernetes.io/out-of-service taint: detached although it may still be mounted"},
		{name: "shutdown, opted in", cfg: Config{DetachOnShutdownTaint: true}, on: attached, node: shut, now: start, wantAction: ActionDetach, wantForce: cache.ForcedOnShutdown,
			wantReason: "node node-a has the node.cloudprovider.kubernetes.io/shutdown taint and is not Ready: detached although it may still be mounted"},
		{name: "not mounted", on: attached, node: cache.Node{Name: "node-a", Presence: cache.NodePresent, Managed: true}, now: start, wantAction: ActionDetach,
			wantReason: "no pod on node-a needs it and kubelet does not report it in use"},
		{name: "being deleted", on: deleting, node: notReady, now: start, wantAction: ActionWait,
			wantReason: "its VolumeAttachment is being deleted: waiting for the CSI external-attacher to detach it; the CSI driver reported: device busy"},
		{name: "unmanaged node", on: attached, node: cache.Node{Name: "node-a", Presence: cache.NodePresent}, now: start, wantAction: ActionNone,
			wantReason: "node node-a is not managed by the attach/detach controller (no volumes.kubernetes.io/controller-managed-attach-detach=true annotation): kubelet attaches and detaches there itself"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.UnmountPolicy.Default.MaxWait == 0 {
				tc.cfg.UnmountPolicy.Default.MaxWait = 6 * time.Minute
			}
			r := &Reconciler{cfg: tc.cfg}
			d := r.decideDetach(tc.on, tc.node, tc.now, func() time.Time {
				if tc.startUnknown {
					return time.Time{}
				}
				return start
			})
			if d.Action != tc.wantAction || d.Force != tc.wantForce || d.Reason() != tc.wantReason {
				t.Errorf("decision = %s %q %q\nwant       %s %q %q", d.Action, d.Force, d.Reason(), tc.wantAction, tc.wantForce, tc.wantReason)
			}
		})
	}
}

func TestAttachDecisionReasons(t *testing.T) {
	node := cache.Node{Name: "node-b", Presence: cache.NodePresent, Managed: true}
	failing := cache.OnNode{Objects: []cache.Attachment{{VolumeAttachment: "va-b", AttachError: "rpc error: code = ResourceExhausted"}}}
	own := cache.OnNode{Node: "node-b", Objects: []cache.Attachment{{VolumeAttachment: "va-b", Attached: true}}}
	copied := cache.OnNode{Node: "node-b", Objects: []cache.Attachment{{VolumeAttachment: "copy-by-another-tool", Attached: true}}}
	tests := []struct {
		name       string
		on         *cache.OnNode
		node       cache.Node
		wantAction Action
		wantReason string
	}{
		{"nothing yet", nil, node, ActionAttach, "to be attached"},
		{"attached", &own, node, ActionNone, "attached"},
		// Kubelet waits for the controller's VolumeAttachment, by its name: a
		// copy another tool made, attached, does not attach the volume for it.
		{"only a copy under another name attached", &copied, node, ActionAttach, "to be attached"},
		{"driver error", &failing, node, ActionAttach, "attaching; the CSI driver reported: rpc error: code = ResourceExhausted"},
		{"node missing", nil, cache.Node{Name: "node-b"}, ActionWait, "node node-b does not exist"},
		{"unmanaged", nil, cache.Node{Name: "node-b", Presence: cache.NodePresent}, ActionWait, "node node-b is not managed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAttach(tc.on, "va-b", tc.node)
			if d.Action != tc.wantAction || !strings.HasPrefix(d.Reason(), tc.wantReason) {
				t.Errorf("decision = %s %q, want %s %q", d.Action, d.Reason(), tc.wantAction, tc.wantReason)
			}
		})
	}
}

// TestExplainCountsAWaitNotStartedFromNowOnlyForTheLiveController: the running
// controller starts the wait for unmount at its next Sync, so its explanation
// counts from now; a snapshot of the cluster cannot know when the leader began
// waiting, and leaves the start unknown.
func TestExplainCountsAWaitNotStartedFromNowOnlyForTheLiveController(t *testing.T) {
	now := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	vol := volumename.CSI("d", "h")
	actual := cache.NewActualState()
	actual.Observe(cache.Observation{Volume: vol, Node: "node-a", VolumeAttachment: "va-1", UID: "uid-1", Attached: true})
	nodes := cache.NewNodes()
	nodes.Set(cache.Node{Name: "node-a", Presence: cache.NodePresent, Managed: true, InUse: map[volumename.UniqueName]struct{}{vol: {}}})
	r := &Reconciler{cfg: Config{
		Desired:       cache.NewDesiredState(),
		Actual:        actual,
		Nodes:         nodes,
		Now:           func() time.Time { return now },
		UnmountPolicy: UnmountPolicy{Default: DriverUnmountPolicy{MaxWait: 6 * time.Minute}},
	}}
	tests := []struct {
		live            bool
		wantWaitStarted time.Time
		wantForceAt     time.Time
	}{
		{live: true, wantWaitStarted: now, wantForceAt: now.Add(6 * time.Minute)},
		{live: false},
	}
	for _, tc := range tests {
		ds := r.Explain(vol, tc.live)
		if len(ds) != 1 {
			t.Fatalf("Explain(live=%t) = %+v, want one decision", tc.live, ds)
		}
		if d := ds[0]; d.Action != ActionWait || !d.WaitStarted.Equal(tc.wantWaitStarted) || !d.ForceAt.Equal(tc.wantForceAt) {
			t.Errorf("Explain(live=%t): %s, wait started %s, force at %s; want wait, %s, %s", tc.live, d.Action, d.WaitStarted, d.ForceAt, tc.wantWaitStarted, tc.wantForceAt)
		}
	}
	if on := actual.Volume(vol); len(on) != 1 || !on[0].UnmountWaitStarted.IsZero() {
		t.Errorf("after the explanations the attachment is %+v, want its wait not started: an explanation only reads", on)
	}
}

// TestAWaitForUnmountEndsWhenAPodNeedsTheVolumeAgain: once a pod on the node needs
// the volume again, Sync ends the wait, so that the next one starts afresh; an
// explanation only reads it.
func TestAWaitForUnmountEndsWhenAPodNeedsTheVolumeAgain(t *testing.T) {
	began := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	vol := cache.Volume{Name: volumename.CSI("d", "h"), Driver: "d", Handle: "h"}
	tests := []struct {
		name      string
		waits     unmountWaits
		wantBegan time.Time
	}{
		{"sync", waitsKept, time.Time{}},
		{"live explanation", waitsFromNow, began},
		{"snapshot explanation", waitsUnknown, began},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			actual := cache.NewActualState()
			actual.Observe(cache.Observation{Volume: vol.Name, Node: "node-a", VolumeAttachment: "va-1", UID: "uid-1", Attached: true})
			actual.StartUnmountWait(vol.Name, "node-a", began, time.Time{})
			desired := cache.NewDesiredState()
			desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p", UID: "u"}, "node-a", []cache.Volume{vol})
			nodes := cache.NewNodes()
			nodes.Set(cache.Node{Name: "node-a", Presence: cache.NodePresent, Managed: true})
			r := &Reconciler{cfg: Config{Desired: desired, Actual: actual, Nodes: nodes, Now: func() time.Time { return began.Add(time.Minute) }}}
			r.decisions(vol.Name, tc.waits)
			if on := actual.Volume(vol.Name); len(on) != 1 || !on[0].UnmountWaitStarted.Equal(tc.wantBegan) {
				t.Errorf("the wait for unmount began at %+v, want %s", on, tc.wantBegan)
			}
		})
	}
}

// TestEachNodeIsJudgedOnItsOwnAttachment: a multi-attach volume attached to
// node-a is still to be attached to node-b, whose pod needs it too.
func TestEachNodeIsJudgedOnItsOwnAttachment(t *testing.T) {
	vol := cache.Volume{Name: volumename.CSI("d", "h"), Driver: "d", Handle: "h", MultiAttach: true}
	actual := cache.NewActualState()
	actual.Observe(cache.Observation{Volume: vol.Name, Node: "node-a", VolumeAttachment: vol.AttachmentOn("node-a"), UID: "uid-a", Attached: true, MultiAttach: true})
	desired := cache.NewDesiredState()
	desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p-a", UID: "u-a"}, "node-a", []cache.Volume{vol})
	desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p-b", UID: "u-b"}, "node-b", []cache.Volume{vol})
	nodes := cache.NewNodes()
	for _, name := range []string{"node-a", "node-b"} {
		nodes.Set(cache.Node{Name: name, Presence: cache.NodePresent, Managed: true, Ready: true})
	}
	r := &Reconciler{cfg: Config{Desired: desired, Actual: actual, Nodes: nodes, Now: time.Now}}
	var got []string
	for _, d := range r.Explain(vol.Name, true) {
		got = append(got, d.Node+" "+string(d.Action))
	}
	if want := []string{"node-a none", "node-b attach"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("decisions %q, want %q", got, want)
	}
}

// TestASingleAttachVolumeHeldElsewhereWaits: a single-attach volume that another
// node holds is not to be attached, and the reason names the holder and what it
// waits for; a multi-attach volume is attached beside it.
func TestASingleAttachVolumeHeldElsewhereWaits(t *testing.T) {
	tests := []struct {
		name        string
		multiAttach bool
		// podOnA: a pod on node-a, the holder, still needs the volume.
		podOnA bool
		// incomplete: the actual state may lack a VolumeAttachment that exists.
		incomplete string
		wantAction Action
		wantHeldBy []string
		wantReason string
	}{
		{name: "held by a node that no longer needs it", wantAction: ActionWait, wantHeldBy: []string{"node-a"},
			wantReason: "a single-attach volume: held by node-a, where no pod needs it any more: waits for its detach"},
		{name: "held by a node whose pod needs it", podOnA: true, wantAction: ActionWait, wantHeldBy: []string{"node-a"},
			wantReason: "a single-attach volume: held by node-a for pod(s) ns/p-a: waits for them to go"},
		{name: "multi-attach", multiAttach: true, podOnA: true, wantAction: ActionAttach, wantReason: "to be attached"},
		{name: "held elsewhere while the state may lack a VolumeAttachment", incomplete: "the informer stopped watching", wantAction: ActionWait,
			wantReason: "the informer stopped watching"},
		{name: "multi-attach while the state may lack a VolumeAttachment", multiAttach: true, incomplete: "the informer stopped watching",
			wantAction: ActionAttach, wantReason: "to be attached"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vol := cache.Volume{Name: volumename.CSI("d", "h"), Driver: "d", Handle: "h", PVName: "pv", MultiAttach: tc.multiAttach}
			actual := cache.NewActualState()
			actual.Observe(cache.Observation{Volume: vol.Name, Node: "node-a", VolumeAttachment: "va-a", UID: "uid-a", Attached: true, MultiAttach: tc.multiAttach})
			actual.SetIncomplete(tc.incomplete)
			desired := cache.NewDesiredState()
			if tc.podOnA {
				desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p-a", UID: "u-a"}, "node-a", []cache.Volume{vol})
			}
			desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p-b", UID: "u-b"}, "node-b", []cache.Volume{vol})
			nodes := cache.NewNodes()
			for _, name := range []string{"node-a", "node-b"} {
				nodes.Set(cache.Node{Name: name, Presence: cache.NodePresent, Managed: true, Ready: true})
			}
			r := &Reconciler{cfg: Config{Desired: desired, Actual: actual, Nodes: nodes, Now: time.Now}}
			ds := r.Explain(vol.Name, true)
			i := slices.IndexFunc(ds, func(d Decision) bool { return d.Node == "node-b" })
			if i < 0 {
				t.Fatalf("no decision for node-b in %+v", ds)
			}
			if d := ds[i]; d.Action != tc.wantAction || !slices.Equal(d.HeldBy, tc.wantHeldBy) || d.Reason() != tc.wantReason {
				t.Errorf("node-b: %s held by %q: %q\nwant    %s held by %q: %q", d.Action, d.HeldBy, d.Reason(), tc.wantAction, tc.wantHeldBy, tc.wantReason)
			}
		})
	}
}

// podView stands for the pod informer's record of its gaps.
type podView struct {
	since    time.Time
	watching bool
}

func (v podView) WatchingSince() (time.Time, bool) { return v.since, v.watching }

// TestAWaitForUnmountCountsFromAPodThatCameAndWentBetweenTwoSyncs: a pod on the
// node needed the volume again and went before the next Sync of the volume (a
// busy queue, soak seed 3020): the wait counts from when it went, not from
// before it came; an explanation reads the same.
func TestAWaitForUnmountCountsFromAPodThatCameAndWentBetweenTwoSyncs(t *testing.T) {
	vol := cache.Volume{Name: volumename.CSI("d", "h"), Driver: "d", Handle: "h"}
	for _, waits := range []unmountWaits{waitsKept, waitsFromNow, waitsUnknown} {
		began := time.Now().Add(-time.Hour)
		actual := cache.NewActualState()
		actual.Observe(cache.Observation{Volume: vol.Name, Node: "node-a", VolumeAttachment: "va-1", UID: "uid-1", Attached: true})
		actual.StartUnmountWait(vol.Name, "node-a", began, time.Time{})
		desired := cache.NewDesiredState()
		pod := cache.PodRef{Namespace: "ns", Name: "p", UID: "u"}
		desired.SetPod(pod, "node-a", []cache.Volume{vol})
		beforeItWent := time.Now()
		desired.DeletePod(pod.Key())
		nodes := cache.NewNodes()
		nodes.Set(cache.Node{Name: "node-a", Presence: cache.NodePresent, Managed: true, InUse: map[volumename.UniqueName]struct{}{vol.Name: {}}})
		r := &Reconciler{cfg: Config{Desired: desired, Actual: actual, Nodes: nodes, Now: func() time.Time { return began.Add(2 * time.Hour) },
			UnmountPolicy: UnmountPolicy{Default: DriverUnmountPolicy{MaxWait: time.Minute}}}}
		ds := r.decisions(vol.Name, waits)
		if len(ds) != 1 || ds[0].WaitStarted.Before(beforeItWent) {
			t.Errorf("waits %d: decisions %+v, want the wait counted from when the pod went, at or after %s", waits, ds, beforeItWent)
		}
	}
}
