// Package app is the attachdetach-controller command: its flags, its clients,
// leader election, the HTTP endpoints for probes and metrics, and the run loop.
package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
)

// Options are the command's settings, from flags.
type Options struct {
	Kubeconfig   string
	HTTPEndpoint string
	// HTTPEndpointInsecure serves HTTPEndpoint over plain HTTP with no
	// authentication; else it is HTTPS, with the certificate in the TLS files or
	// one generated at start.
	HTTPEndpointInsecure bool
	TLSCertFile          string
	TLSPrivateKeyFile    string
	EnablePprof          bool
	Controller           controller.Options

	// ContentType is the encoding of every request and watch to the API server.
	ContentType string

	KubeAPIQPS   float64
	KubeAPIBurst int
	EventQPS     float64
	EventBurst   int

	LeaderElect             bool
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	LeaderElectionName      string
	LeaderElectionNamespace string

	// Logging is the log format and verbosity (see loggingFlags), applied by
	// ApplyLogging.
	Logging *logsapi.LoggingConfiguration

	ShowVersion bool
}

// ParseFlags reads the command line, the logging flags of Kubernetes components
// included. It only reads: ApplyLogging applies the logging flags.
func ParseFlags(args []string, output io.Writer) (*Options, error) {
	o := &Options{Controller: controller.DefaultOptions(), Logging: logsapi.NewLoggingConfiguration()}
	fs := newFlagSet(o)
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.ShowVersion {
		return o, nil
	}
	return o, o.Validate()
}

// newFlagSet registers the command's flags, setting o.
func newFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("attachdetach-controller", flag.ContinueOnError)
	addLoggingFlags(fs, o.Logging)

	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Empty: the in-cluster configuration.")
	fs.StringVar(&o.HTTPEndpoint, "http-endpoint", ":8080",
		"host:port of the HTTPS server for /healthz, /readyz, /metrics and /debug/explain, as the CSI sidecars name it. "+
			"Every path but the probes needs a bearer token the API server accepts (TokenReview) and RBAC permission for the path (SubjectAccessReview: get, or put for PUT). Empty: no server.")
	fs.BoolVar(&o.HTTPEndpointInsecure, "http-endpoint-insecure", false,
		"Serve --http-endpoint over plain HTTP with no authentication and no authorization: anyone who reaches it reads /metrics and /debug/explain "+
			"(which pods use which volumes on which nodes), and with --enable-pprof the profiles and -v. For a developer's machine only.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "",
		"PEM certificate (chain) of --http-endpoint; reread when the file changes. Empty: a self-signed certificate generated in memory at start.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file.")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", false,
		"Serve Go's profiles (net/http/pprof) under /debug/pprof/ on --http-endpoint, as the CSI sidecars name it, and take a new -v with PUT /debug/flags/v, "+
			"to those the API server allows get (profiles) or put (-v) on these paths.")
	addDetachPolicyFlags(fs, &o.Controller)
	fs.DurationVar(&o.Controller.SyncPeriod, "attach-detach-reconcile-sync-period", o.Controller.SyncPeriod,
		"Period of the full safety pass that re-evaluates every pod, volume and node; at least 1s.")
	fs.BoolVar(&o.Controller.DisableSync, "disable-attach-detach-reconcile-sync", false, "Turn off the periodic full safety pass.")
	fs.DurationVar(&o.Controller.OperationTimeout, "operation-timeout", o.Controller.OperationTimeout,
		"How long one attach or detach waits for the CSI external-attacher before it fails and is retried with backoff.")
	fs.IntVar(&o.Controller.Workers, "workers", o.Controller.Workers, "Volumes reconciled in parallel.")
	fs.IntVar(&o.Controller.StatusWorkers, "status-workers", o.Controller.StatusWorkers, "Nodes whose status is written in parallel.")
	fs.DurationVar(&o.Controller.StatusMinBatchWindow, "status-min-batch-window", 0,
		"Shortest time a node's status write waits for more volumes attached to or detached from the node, so that they share one write; "+
			"the wait also grows with the rate limit's queue and the API server's response time. Longer: fewer node status writes, and each attach reported to kubelet later. At most 1m.")
	fs.StringVar(&o.ContentType, "kube-api-content-type", protobufContentType,
		"Content type of requests and watches sent to the API server: "+protobufContentType+" or "+jsonContentType+".")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", 20, "Queries per second to the API server, events excluded.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 30, "Burst of queries to the API server, events excluded.")
	fs.Float64Var(&o.EventQPS, "event-qps", 10, "Events per second written to the API server, on a rate limit of their own; events also take the --kube-api-qps tokens no other request waits for, while half of --kube-api-burst stays.")
	fs.IntVar(&o.EventBurst, "event-burst", 50, "Burst of events written to the API server.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Run only while holding the leader Lease, so that several replicas can run.")
	fs.BoolVar(&o.Controller.Shadow, "shadow", false,
		"Run beside kube-controller-manager's attach/detach controller and write nothing (no VolumeAttachment, node status, event or Lease): "+
			"compare each decision, once it has stood for --shadow-grace, with what node status shows, and report agreements and disagreements in metrics and logs.")
	fs.DurationVar(&o.Controller.ShadowGrace, "shadow-grace", o.Controller.ShadowGrace,
		"In shadow mode, how long a decision must stand before it is compared with the cluster.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a standby waits after the last renewal before taking over.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew before it stops leading.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the Lease.")
	fs.StringVar(&o.LeaderElectionName, "leader-elect-resource-name", "attachdetach-controller", "Name of the leader Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-elect-resource-namespace", defaultNamespace(), "Namespace of the leader Lease (default: $POD_NAMESPACE, else kube-system).")
	fs.BoolVar(&o.ShowVersion, "version", false, "Print the version and exit.")

	fs.Usage = func() { printUsage(fs) }
	return fs
}

// addDetachPolicyFlags registers the flags that decide when a volume still mounted
// is detached anyway; explain takes them too, to apply the deployment's policy.
func addDetachPolicyFlags(fs *flag.FlagSet, o *controller.Options) {
	fs.DurationVar(&o.MaxWaitForUnmount, "max-wait-for-unmount", o.MaxWaitForUnmount,
		"How long a volume still mounted on a node that no longer needs it stays attached before it is force-detached from a node that is not Ready.")
	fs.BoolVar(&o.DisableForceDetachOnTimeout, "disable-force-detach-on-timeout", o.DisableForceDetachOnTimeout,
		"Never force-detach a volume still mounted after --max-wait-for-unmount, even from a node that is not Ready.")
	fs.Var((*driverPolicies)(&o.MaxWaitForUnmountPerDriver), "max-wait-for-unmount-per-driver",
		"DRIVER=DURATION or DRIVER=never, comma-separated: overrides --max-wait-for-unmount for the volumes of these CSI drivers "+
			"(kubernetes.io/iscsi and kubernetes.io/fc name the in-tree plugins); never turns force detach on timeout off for that driver only.")
	fs.BoolVar(&o.DetachOnShutdownTaint, "detach-on-shutdown-taint", o.DetachOnShutdownTaint,
		"Detach the volumes of a node that is not Ready and carries the cloud provider's node.cloudprovider.kubernetes.io/shutdown taint at once, "+
			"as if it had the out-of-service taint. Only safe where that taint means the instance is stopped.")
}

// The encodings the API server speaks to the controller: Kubernetes' protobuf, the
// default of kube-controller-manager and the cheaper to decode, and JSON.
const (
	protobufContentType = "application/vnd.kubernetes.protobuf"
	jsonContentType     = "application/json"
)

func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "kube-system"
}

// Validate refuses values the controller cannot run with, naming the flag.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Controller.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validateLogging(o.Logging); err != nil {
		errs = append(errs, err)
	}
	// kube-controller-manager refuses a shorter period whether or not the pass is
	// disabled.
	if o.Controller.SyncPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--attach-detach-reconcile-sync-period must be at least 1s, as in kube-controller-manager, got %s", o.Controller.SyncPeriod))
	}
	if o.ContentType != protobufContentType && o.ContentType != jsonContentType {
		errs = append(errs, fmt.Errorf("--kube-api-content-type must be %s or %s, got %q", protobufContentType, jsonContentType, o.ContentType))
	}
	if o.EnablePprof && o.HTTPEndpoint == "" {
		errs = append(errs, errors.New("--enable-pprof needs an --http-endpoint to serve on"))
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	if o.TLSCertFile != "" && (o.HTTPEndpointInsecure || o.HTTPEndpoint == "") {
		errs = append(errs, errors.New("--tls-cert-file needs an --http-endpoint served over HTTPS, without --http-endpoint-insecure"))
	}
	if o.KubeAPIQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be positive, got %v", o.KubeAPIQPS))
	}
	if o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst must be at least 1, got %d", o.KubeAPIBurst))
	}
	if o.EventQPS <= 0 {
		errs = append(errs, fmt.Errorf("--event-qps must be positive, got %v", o.EventQPS))
	}
	if o.EventBurst < 1 {
		errs = append(errs, fmt.Errorf("--event-burst must be at least 1, got %d", o.EventBurst))
	}
	if o.Controller.Shadow && o.LeaderElect {
		errs = append(errs, errors.New("--shadow writes nothing, not even a Lease: it cannot run with --leader-elect"))
	}
	if o.LeaderElect {
		switch {
		case o.RetryPeriod <= 0:
			errs = append(errs, fmt.Errorf("--leader-elect-retry-period must be positive, got %s", o.RetryPeriod))
		case o.RenewDeadline <= o.RetryPeriod:
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than --leader-elect-retry-period (%s)", o.RenewDeadline, o.RetryPeriod))
		case o.LeaseDuration <= o.RenewDeadline:
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", o.LeaseDuration, o.RenewDeadline))
		}
		if o.LeaderElectionName == "" || o.LeaderElectionNamespace == "" {
			errs = append(errs, errors.New("--leader-elect-resource-name and --leader-elect-resource-namespace must not be empty"))
		}
	}
	return errors.Join(errs...)
}
