package killproxy

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

func draw(rule Rule, n int) []Fault {
	r, _ := http.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/configmaps", nil)
	out := make([]Fault, n)
	for i := range out {
		out[i] = rule(r)
	}
	return out
}

func TestRandom(t *testing.T) {
	choices := []Weighted{{Fault{}, 2}, {Fail500, 1}, {DropResponse, 1}, {ResetConnection, 0}}
	first, again := draw(Random(7, choices...), 400), draw(Random(7, choices...), 400)
	if !slices.Equal(first, again) {
		t.Error("two rules with the same seed chose different faults")
	}
	if slices.Equal(first, draw(Random(8, choices...), 400)) {
		t.Error("rules with different seeds chose the same 400 faults")
	}
	counts := map[Fault]int{}
	for _, f := range first {
		counts[f]++
	}
	if counts[ResetConnection] != 0 {
		t.Errorf("a fault of weight 0 was chosen %d times", counts[ResetConnection])
	}
	// Expected: 200, 100, 100.
	if n := counts[Fault{}]; n < 150 || n > 250 {
		t.Errorf("no fault %d times out of 400, want about 200", n)
	}
	if n := counts[Fail500]; n < 60 || n > 140 {
		t.Errorf("500 %d times out of 400, want about 100", n)
	}
}

func TestAtMostInARow(t *testing.T) {
	slowDrop := Fault{Delay: time.Second, Drop: true}
	slowReset := Fault{Delay: time.Second, Reset: true}
	rule := AtMostInARow(2, Script(Fail500, slowDrop, slowReset, Fail500, Delayed(time.Second), Fail500, Fail500, Fail500))
	want := []Fault{Fail500, slowDrop, Delayed(time.Second), Fail500, Delayed(time.Second), Fail500, Fail500, {}}
	if got := draw(rule, len(want)); !slices.Equal(got, want) {
		t.Errorf("at most 2 in a row gave %v, want %v", got, want)
	}
	other := AtMostInARow(1, Script(Fail500, Fail500, Fail500))
	post, _ := http.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/configmaps", nil)
	del, _ := http.NewRequest(http.MethodDelete, "/api/v1/namespaces/ns/configmaps/one", nil)
	if got := []Fault{other(post), other(del), other(post)}; !slices.Equal(got, []Fault{Fail500, Fail500, {}}) {
		t.Errorf("requests to two paths gave %v, want each to count its own run of faults", got)
	}
}

func TestScript(t *testing.T) {
	got := draw(Script(Throttle, Fault{}, DropResponse), 5)
	want := []Fault{Throttle, {}, DropResponse, {}, {}}
	if !slices.Equal(got, want) {
		t.Errorf("script gave %v, want %v", got, want)
	}
	writes := When(IsWrite, Script(Fail500))
	get, _ := http.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/configmaps", nil)
	if f := writes(get); f != (Fault{}) {
		t.Errorf("a rule for writes gave a GET the fault %s", f)
	}
	if f := draw(writes, 1)[0]; f != Fail500 {
		t.Errorf("a rule for writes gave a POST the fault %s, want %s", f, Fail500)
	}
}

// TestFaults injects each fault into a create and checks what the client sees, what
// the API server has, and what the proxy recorded.
func TestFaults(t *testing.T) {
	const ns = "faults"
	createNamespace(t, ns)
	connectionError := func(err error) bool {
		var status apierrors.APIStatus
		return err != nil && !errors.As(err, &status)
	}
	for _, tc := range []struct {
		name  string
		fault Fault
		// clientErr judges the error the client got.
		clientErr func(error) bool
		created   bool
		// outcomes are those of the writes the proxy saw, in order.
		outcomes []Outcome
		minTime  time.Duration
	}{
		{name: "500", fault: Fail500, clientErr: apierrors.IsInternalError, outcomes: []Outcome{Failed}},
		// client-go waits as told by Retry-After and sends the request again.
		{name: "429", fault: Throttle, clientErr: func(err error) bool { return err == nil }, created: true,
			outcomes: []Outcome{Failed, Forwarded}, minTime: time.Second},
		{name: "drop", fault: DropResponse, clientErr: connectionError, created: true, outcomes: []Outcome{Dropped}},
		{name: "reset", fault: ResetConnection, clientErr: connectionError, outcomes: []Outcome{ConnReset}},
		{name: "delay", fault: Delayed(300 * time.Millisecond), clientErr: func(err error) bool { return err == nil }, created: true,
			outcomes: []Outcome{Forwarded}, minTime: 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, client := startProxy(t, Options{})
			p.SetFaults(When(IsWrite, Script(tc.fault)))
			name := "cm-" + tc.name
			begin := time.Now()
			_, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, name), metav1.CreateOptions{})
			took := time.Since(begin)
			if !tc.clientErr(err) {
				t.Errorf("create with fault %s: unexpected error %v", tc.fault, err)
			}
			if took < tc.minTime {
				t.Errorf("create with fault %s took %s, want at least %s", tc.fault, took, tc.minTime)
			}
			_, err = env.Client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
			if created := err == nil; created != tc.created {
				t.Errorf("with fault %s the object exists: %t, want %t (%v)", tc.fault, created, tc.created, err)
			}
			var outcomes []Outcome
			for _, w := range p.Writes() {
				outcomes = append(outcomes, w.Outcome)
				if reached := w.Outcome == Forwarded || w.Outcome == Dropped; reached != w.Reached() {
					t.Errorf("write %s: Reached() = %t", w, w.Reached())
				}
			}
			if !slices.Equal(outcomes, tc.outcomes) {
				t.Errorf("writes %v, want outcomes %v", p.Writes(), tc.outcomes)
			}
		})
	}
}

// waitClosed waits for a watch to end.
func waitClosed(t *testing.T, w watch.Interface) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the watch still runs 5s after its connection was cut")
		}
	}
}

func openWatch(t *testing.T, client kubernetes.Interface, ns string) watch.Interface {
	t.Helper()
	w, err := client.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching through the proxy: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestCutConnections(t *testing.T) {
	const ns = "cut"
	createNamespace(t, ns)
	p, client := startProxy(t, Options{})
	w := openWatch(t, client, ns)
	var cut int
	deadline := time.Now().Add(5 * time.Second)
	for cut == 0 && time.Now().Before(deadline) {
		cut = p.CutConnections(IsWatch)
		time.Sleep(20 * time.Millisecond)
	}
	if cut != 1 {
		t.Fatalf("CutConnections(IsWatch) cut %d connections, want 1", cut)
	}
	waitClosed(t, w)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, "after-cut"), metav1.CreateOptions{}); err != nil {
		t.Errorf("create after the cut: %v", err)
	}
}

func TestPartition(t *testing.T) {
	const ns = "partition"
	createNamespace(t, ns)
	p, client := startProxy(t, Options{})
	w := openWatch(t, client, ns)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, "before"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create before the partition: %v", err)
	}
	cutAt := p.Partition()
	waitClosed(t, w)
	for i := range 3 {
		if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, fmt.Sprintf("during-%d", i)), metav1.CreateOptions{}); err == nil {
			t.Errorf("create %d during the partition succeeded", i)
		}
	}
	restored := time.Now()
	p.Restore()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, "after"), metav1.CreateOptions{}); err != nil {
		t.Errorf("create after the partition: %v", err)
	}
	var reached []string
	for _, w := range p.Writes() {
		if w.Reached() && !w.Forwarded.Before(cutAt) && w.Forwarded.Before(restored) {
			t.Errorf("write forwarded during the partition: %s", w)
		}
		if w.Reached() {
			reached = append(reached, w.URI)
		}
	}
	if len(reached) != 2 {
		t.Errorf("writes that reached the API server: %v, want the one before and the one after the partition", reached)
	}
}
