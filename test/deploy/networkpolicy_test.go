package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestNetworkPolicy checks the manifests' NetworkPolicy: it selects the
// Deployment's pods, lets in only the metrics port from a namespace selector,
// lets out only the API server's ports and DNS, is stored by the API server, and
// with it applied the controller still leads and attaches. The test API server
// has no network plugin, so nothing enforces the policy here: that the traffic
// it allows is all the controller needs is shown on a cluster whose plugin
// enforces it, not by this test.
func TestNetworkPolicy(t *testing.T) {
	policy := renderedObject(t, "NetworkPolicy", &networkingv1.NetworkPolicy{})
	pods := renderedObject(t, "Deployment", &appsv1.Deployment{}).Spec.Template
	selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if selector.Empty() || !selector.Matches(labels.Set(pods.Labels)) {
		t.Errorf("the policy selects %s, not the controller's pods %v", selector, pods.Labels)
	}
	if !slices.Equal(policy.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policy types %v, want Ingress and Egress", policy.Spec.PolicyTypes)
	}

	if len(policy.Spec.Ingress) != 1 {
		t.Fatalf("%d ingress rules, want 1 (the metrics port)", len(policy.Spec.Ingress))
	}
	in := policy.Spec.Ingress[0]
	metricsPort := intstr.FromString(controllerContainer(t).Ports[0].Name)
	if len(in.Ports) != 1 || *in.Ports[0].Port != metricsPort {
		t.Errorf("ingress ports %v, want only %s", in.Ports, metricsPort.String())
	}
	for _, from := range in.From {
		if from.NamespaceSelector == nil || from.PodSelector != nil || from.IPBlock != nil {
			t.Errorf("ingress from %v, want a namespace selector only", from)
		}
	}

	var egress []string
	for _, rule := range policy.Spec.Egress {
		for _, p := range rule.Ports {
			egress = append(egress, string(*p.Protocol)+"/"+p.Port.String())
		}
	}
	slices.Sort(egress)
	if want := []string{"TCP/443", "TCP/53", "TCP/6443", "UDP/53"}; !slices.Equal(egress, want) {
		t.Errorf("egress to %v, want the API server's ports and DNS only: %v", egress, want)
	}

	installManifests(t)
	stored, err := env.Client.NetworkingV1().NetworkPolicies(controllerNamespace).Get(t.Context(), policy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the API server does not have the NetworkPolicy: %v", err)
	}
	if !slices.Equal(stored.Spec.PolicyTypes, policy.Spec.PolicyTypes) {
		t.Errorf("stored policy types %v, rendered %v", stored.Spec.PolicyTypes, policy.Spec.PolicyTypes)
	}
	const lease = "network-policy"
	r := startReplica(t, "network-policy", replicaOptions{
		account: controllerAccount,
		lease:   lease,
		args:    append(deploymentArgs(t), "--leader-elect-resource-name="+lease),
	})
	waitLeader(t, lease, r, operationTimeout)
	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1})
	v := w.CreateVolume("data", workload.VolumeOptions{})
	w.CreatePod("app", w.Nodes[0], v.Claim)
	waitAttachedOnlyTo(w, v, w.Nodes[0], operationTimeout)
}
