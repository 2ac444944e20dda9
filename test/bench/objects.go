package main

import (
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// objects is how much of a real cluster's objects the workload carries.
type objects string

const (
	// realisticObjects are nodes, pods, claims and PersistentVolumes with what
	// kubelet, a StatefulSet, a CSI provisioner and the PersistentVolume controller
	// put in them: labels, annotations, finalizers, container specs, node images
	// and capacity. Both controllers' informers hold them; what each keeps of them
	// is its own cost.
	realisticObjects objects = "realistic"
	// minimalObjects carry only the fields the attach/detach logic reads.
	minimalObjects objects = "minimal"
)

func parseObjects(s string) (objects, error) {
	switch o := objects(s); o {
	case realisticObjects, minimalObjects:
		return o, nil
	}
	return "", fmt.Errorf("objects %q: want %s or %s", s, realisticObjects, minimalObjects)
}

const (
	benchZone   = "zone-a"
	benchRegion = "region-1"
	appLabel    = "bench-db"
)

// zoneLabels are the topology labels of every node, and of every volume's node
// affinity.
func zoneLabels() map[string]string {
	return map[string]string{
		corev1.LabelTopologyZone:       benchZone,
		corev1.LabelTopologyRegion:     benchRegion,
		"topology." + driver + "/zone": benchZone,
	}
}

// dressNode adds what kubelet and a cloud provider report of a node.
func dressNode(node *corev1.Node) {
	for k, v := range zoneLabels() {
		node.Labels[k] = v
	}
	for k, v := range map[string]string{
		corev1.LabelArchStable:                         "amd64",
		corev1.LabelInstanceTypeStable:                 "m6i.2xlarge",
		"node.kubernetes.io/lifecycle":                 "normal",
		"kubernetes.io/os":                             "linux",
		"node-role.kubernetes.io/worker":               "",
		"nodepool.example.com/name":                    "general-purpose",
		"nodepool.example.com/generation":              "7",
		"feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
	} {
		node.Labels[k] = v
	}
	for k, v := range map[string]string{
		"csi.volume.kubernetes.io/nodeid":        fmt.Sprintf(`{%q:%q}`, driver, node.Name),
		"node.alpha.kubernetes.io/ttl":           "0",
		"kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
		"projectcalico.org/IPv4Address":          "10.0.12.34/20",
		"alpha.kubernetes.io/provided-node-ip":   "10.0.12.34",
	} {
		node.Annotations[k] = v
	}
	node.Spec.PodCIDR = "10.244.12.0/24"
	node.Spec.PodCIDRs = []string{"10.244.12.0/24"}
	node.Spec.ProviderID = "example:///" + benchZone + "/" + node.Name
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:                 resource.MustParse("8"),
		corev1.ResourceMemory:              resource.MustParse("32Gi"),
		corev1.ResourcePods:                resource.MustParse("110"),
		corev1.ResourceEphemeralStorage:    resource.MustParse("100Gi"),
		"hugepages-2Mi":                    resource.MustParse("0"),
		"attachable-volumes-csi-" + driver: resource.MustParse("39"),
	}
	node.Status.Capacity = capacity
	node.Status.Allocatable = capacity.DeepCopy()
	now := metav1.Now()
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
			Type: t, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficient" + string(t),
			Message: "kubelet has sufficient resources available", LastHeartbeatTime: now, LastTransitionTime: now,
		})
	}
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.12.34"},
		{Type: corev1.NodeHostName, Address: node.Name},
		{Type: corev1.NodeInternalDNS, Address: node.Name + ".compute.internal"},
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: hash(node.Name), SystemUUID: hash(node.Name + "uuid"), BootID: hash(node.Name + "boot"),
		KernelVersion: "6.1.0-27-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
		ContainerRuntimeVersion: "containerd://2.1.4", KubeletVersion: "v1.37.1", KubeProxyVersion: "v1.37.1",
		OperatingSystem: "linux", Architecture: "amd64",
	}
	for i := range 30 {
		name := fmt.Sprintf("registry.example.com/team-%d/service-%d", i%7, i)
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names:     []string{name + "@sha256:" + hash(name) + hash(name+"2"), name + ":v1." + fmt.Sprint(i)},
			SizeBytes: int64(20_000_000 + i*1_000_000),
		})
	}
}

// dressPod makes the pod look like a StatefulSet's database replica: labels,
// owner, two containers with ports, environment, resources and probes, the
// service account token volume and the default tolerations.
func dressPod(pod *corev1.Pod) {
	pod.Labels = map[string]string{
		"app.kubernetes.io/name":             appLabel,
		"app.kubernetes.io/instance":         appLabel + "-prod",
		"app.kubernetes.io/component":        "database",
		"controller-revision-hash":           appLabel + "-5d8f9c7b6",
		"statefulset.kubernetes.io/pod-name": pod.Name,
	}
	pod.Annotations = map[string]string{
		"kubectl.kubernetes.io/default-container": "app",
		"prometheus.io/scrape":                    "true",
		"prometheus.io/port":                      "9187",
	}
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "StatefulSet", Name: appLabel, UID: "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	app := &pod.Spec.Containers[0]
	app.Ports = []corev1.ContainerPort{{Name: "db", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}}
	for i := range 8 {
		app.Env = append(app.Env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-of-setting-%d", i)})
	}
	app.Env = append(app.Env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	app.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
	app.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"pg_isready", "-U", "postgres"}}}, PeriodSeconds: 10}
	app.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(5432)}}, InitialDelaySeconds: 30}
	app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name: "metrics", Image: "registry.example.com/exporters/postgres-exporter:v0.15.0",
		Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9187, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
	})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
		DefaultMode: ptr.To[int32](0o644),
	}}})
	pod.Spec.ServiceAccountName = "default"
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = appLabel
	pod.Spec.Tolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
}

// dressClaim adds what a StatefulSet, a CSI provisioner and the PersistentVolume
// controller put on a claim.
func dressClaim(pvc *corev1.PersistentVolumeClaim) {
	pvc.Labels = map[string]string{"app.kubernetes.io/name": appLabel, "app.kubernetes.io/instance": appLabel + "-prod"}
	pvc.Annotations = map[string]string{
		"pv.kubernetes.io/bind-completed":               "yes",
		"pv.kubernetes.io/bound-by-controller":          "yes",
		"volume.beta.kubernetes.io/storage-provisioner": driver,
		"volume.kubernetes.io/storage-provisioner":      driver,
	}
	pvc.Finalizers = []string{"kubernetes.io/pvc-protection"}
	pvc.Spec.StorageClassName = ptr.To("fast-ssd")
	pvc.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
}

// dressPV adds what a CSI provisioner puts on a PersistentVolume.
func dressPV(pv *corev1.PersistentVolume) {
	pv.Annotations = map[string]string{
		"pv.kubernetes.io/provisioned-by":                            driver,
		"volume.kubernetes.io/provisioner-deletion-secret-name":      "",
		"volume.kubernetes.io/provisioner-deletion-secret-namespace": "",
	}
	pv.Finalizers = []string{"kubernetes.io/pv-protection", "external-provisioner.volume.kubernetes.io/finalizer"}
	pv.Spec.StorageClassName = "fast-ssd"
	pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	pv.Spec.MountOptions = []string{"noatime", "discard"}
	if csi := pv.Spec.CSI; csi != nil {
		csi.FSType = "ext4"
		csi.VolumeAttributes = map[string]string{
			"storage.kubernetes.io/csiProvisionerIdentity": "1732400000000-8081-" + driver,
			"type":       "ssd",
			"iops":       "3000",
			"throughput": "125",
			"encrypted":  "true",
		}
	}
	var terms []corev1.NodeSelectorRequirement
	for k, v := range zoneLabels() {
		terms = append(terms, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}})
	}
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: terms}}}}
}

func hash(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x%016x", h.Sum64(), h.Sum64()^0x9e3779b97f4a7c15)
}
