package shadow

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const grace = time.Minute

var vol = volumename.CSI("d", "h")

type comparison struct {
	expected Expectation
	agreed   bool
}

func TestCompare(t *testing.T) {
	waitStarted := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		decision reconciler.Decision
		listed   bool
		want     []comparison
	}{
		{"attach, then listed", reconciler.Decision{Wanted: true, Action: reconciler.ActionAttach}, true, []comparison{{ExpectAttached, true}}},
		{"attach, never listed", reconciler.Decision{Wanted: true, Action: reconciler.ActionAttach}, false, []comparison{{ExpectAttached, false}}},
		{"attached and wanted, listed", reconciler.Decision{Wanted: true, Action: reconciler.ActionNone}, true, []comparison{{ExpectAttached, true}}},
		{"held elsewhere, not listed", reconciler.Decision{Wanted: true, Action: reconciler.ActionWait}, false, []comparison{{ExpectNotAttached, true}}},
		{"held elsewhere, listed anyway", reconciler.Decision{Wanted: true, Action: reconciler.ActionWait}, true, []comparison{{ExpectNotAttached, false}}},
		{"detach, gone", reconciler.Decision{Action: reconciler.ActionDetach}, false, []comparison{{ExpectDetached, true}}},
		{"detach, still listed", reconciler.Decision{Action: reconciler.ActionDetach}, true, []comparison{{ExpectDetached, false}}},
		{"mounted, kept", reconciler.Decision{Action: reconciler.ActionWait, WaitStarted: waitStarted}, true, []comparison{{ExpectKeptMounted, true}}},
		{"mounted, detached anyway", reconciler.Decision{Action: reconciler.ActionWait, WaitStarted: waitStarted}, false, []comparison{{ExpectKeptMounted, false}}},
		{"VolumeAttachment being deleted: nothing to compare", reconciler.Decision{Action: reconciler.ActionWait}, false, nil},
		{"unmanaged node: nothing to compare", reconciler.Decision{Action: reconciler.ActionNone}, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.decision.Node = "node-a"
			c, got, now := newComparer(t, tc.listed)
			c.Observe(vol, []reconciler.Decision{tc.decision})
			*now = now.Add(grace - time.Second)
			c.CompareDue()
			if len(*got) != 0 {
				t.Fatalf("compared before the grace period: %v", *got)
			}
			*now = now.Add(time.Second)
			c.CompareDue()
			c.CompareDue()
			if len(*got) != len(tc.want) || (len(tc.want) > 0 && (*got)[0] != tc.want[0]) {
				t.Errorf("comparisons = %v, want %v (once)", *got, tc.want)
			}
		})
	}
}

// TestChangedDecisionRestartsTheGrace: a decision that changes before the grace
// period is over is not held against the cluster; the new one is, a full grace
// period later.
func TestChangedDecisionRestartsTheGrace(t *testing.T) {
	c, got, now := newComparer(t, true)
	c.Observe(vol, []reconciler.Decision{{Node: "node-a", Action: reconciler.ActionDetach}})
	*now = now.Add(grace / 2)
	c.Observe(vol, []reconciler.Decision{{Node: "node-a", Wanted: true, Action: reconciler.ActionAttach}})
	*now = now.Add(grace / 2)
	c.CompareDue()
	if len(*got) != 0 {
		t.Fatalf("compared a decision replaced before its grace period: %v", *got)
	}
	*now = now.Add(grace / 2)
	c.CompareDue()
	if want := (comparison{ExpectAttached, true}); len(*got) != 1 || (*got)[0] != want {
		t.Errorf("comparisons = %v, want [%v]", *got, want)
	}
	c.Observe(vol, nil)
	if len(c.pending) != 0 {
		t.Errorf("pending = %v after the volume has no decision left", c.pending)
	}
}

// TestReplacedDecisionAlreadyMet: a detach the other controller carried out
// before the grace period ends (its VolumeAttachment gone, so no decision is
// left) counts as an agreement; one not carried out counts as nothing.
func TestReplacedDecisionAlreadyMet(t *testing.T) {
	for _, listed := range []bool{false, true} {
		c, got, now := newComparer(t, listed)
		c.Observe(vol, []reconciler.Decision{{Node: "node-a", Action: reconciler.ActionDetach}})
		*now = now.Add(grace / 2)
		c.Observe(vol, nil)
		var want []comparison
		if !listed {
			want = []comparison{{ExpectDetached, true}}
		}
		if len(*got) != len(want) || (len(want) > 0 && (*got)[0] != want[0]) {
			t.Errorf("listed %v: comparisons = %v, want %v", listed, *got, want)
		}
	}
}

// TestDisagreementLogLine: a disagreement is logged once, with the rule's reason
// and explain's text about the volume; an agreement is not logged.
func TestDisagreementLogLine(t *testing.T) {
	for _, listed := range []bool{false, true} {
		c, _, now := newComparer(t, listed)
		var lines []string
		c.logger = funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
		c.Observe(vol, []reconciler.Decision{{Node: "node-a", Wanted: true, Action: reconciler.ActionAttach, Code: reconciler.ReasonToAttach}})
		*now = now.Add(grace)
		c.CompareDue()
		if listed {
			if len(lines) != 0 {
				t.Errorf("an agreement logged %q", lines)
			}
			continue
		}
		want := `"reason"="to be attached" "explain"="explained ` + string(vol) + `"`
		if len(lines) != 1 || !strings.Contains(lines[0], `"msg"="Shadow disagreement`) || !strings.Contains(lines[0], want) {
			t.Errorf("logged %q, want one disagreement with %s", lines, want)
		}
	}
}

func newComparer(t *testing.T, listed bool) (*Comparer, *[]comparison, *time.Time) {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if listed {
		node.Status.VolumesAttached = []v1.AttachedVolume{{Name: v1.UniqueVolumeName(vol)}}
	}
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	if err := indexer.Add(node); err != nil {
		t.Fatal(err)
	}
	var got []comparison
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	c := New(klog.Background(), grace, corelisters.NewNodeLister(indexer), func(e Expectation, agreed bool) { got = append(got, comparison{e, agreed}) },
		func(v volumename.UniqueName) string { return "explained " + string(v) })
	c.now = func() time.Time { return now }
	return c, &got, &now
}

// TestExpectationsListsEveryOutcome: every expectation a decision can have is in
// Expectations, which the metrics export at 0 from the start.
func TestExpectationsListsEveryOutcome(t *testing.T) {
	seen := map[Expectation]bool{}
	for _, action := range []reconciler.Action{reconciler.ActionNone, reconciler.ActionWait, reconciler.ActionAttach, reconciler.ActionDetach} {
		for _, wanted := range []bool{false, true} {
			for _, waitStarted := range []time.Time{{}, time.Now()} {
				if e, ok := expectationOf(reconciler.Decision{Action: action, Wanted: wanted, WaitStarted: waitStarted}); ok {
					seen[e] = true
				}
			}
		}
	}
	for e := range seen {
		if !slices.Contains(Expectations, e) {
			t.Errorf("Expectations lacks %q", e)
		}
	}
	if len(seen) != len(Expectations) {
		t.Errorf("decisions have %d expectations, Expectations lists %d", len(seen), len(Expectations))
	}
}
