package interleave

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

type recorder struct{ met []string }

func (r *recorder) At(point, id string) { r.met = append(r.met, point+" "+id) }

func TestAMeetingPointWithoutASchedulerReturnsAtOnce(t *testing.T) {
	r := &recorder{}
	WithScheduler(context.Background(), r)
	At(context.Background(), "volume", "v")
	if len(r.met) != 0 {
		t.Errorf("a scheduler in another context was asked: %v", r.met)
	}
}

func TestTheSchedulerOfTheContextIsAskedWithPointAndItem(t *testing.T) {
	r := &recorder{}
	ctx := WithScheduler(context.Background(), r)
	At(ctx, "node", "node-1")
	At(ctx, "resync", "")
	if want := []string{"node node-1", "resync "}; !slices.Equal(r.met, want) {
		t.Errorf("met %v, want %v", r.met, want)
	}
}

func TestEveryInformerEventMeetsBeforeItIsHandled(t *testing.T) {
	r := &recorder{}
	ctx := WithScheduler(context.Background(), r)
	var handled []string
	h := Handler(ctx, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { handled = append(handled, "add") },
		UpdateFunc: func(_, _ any) { handled = append(handled, "update") },
		DeleteFunc: func(any) { handled = append(handled, "delete") },
	})
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	h.OnAdd(node, false)
	h.OnUpdate(node, node)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "node-1", Obj: node})
	if want := []string{"add", "update", "delete"}; !slices.Equal(handled, want) {
		t.Errorf("handled %v, want %v", handled, want)
	}
	want := []string{"event *v1.Node node-1", "event *v1.Node node-1", "event *v1.Node node-1"}
	if !slices.Equal(r.met, want) {
		t.Errorf("met %v, want %v", r.met, want)
	}
}

func TestAHandlerWithoutASchedulerIsItself(t *testing.T) {
	WithScheduler(context.Background(), &recorder{})
	h := cache.ResourceEventHandlerFuncs{}
	if got, ok := Handler(context.Background(), h).(cache.ResourceEventHandlerFuncs); !ok || got.AddFunc != nil {
		t.Errorf("Handler without a scheduler = %T, want the handler given", got)
	}
}
