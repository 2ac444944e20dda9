package app

import (
	"errors"
	"flag"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o *Options)
	}{
		{name: "defaults match kube-controller-manager", check: func(t *testing.T, o *Options) {
			c := o.Controller
			if c.MaxWaitForUnmount != 6*time.Minute || c.SyncPeriod != time.Minute || c.OperationTimeout != 2*time.Minute ||
				o.KubeAPIQPS != 20 || o.KubeAPIBurst != 30 || o.LeaseDuration != 15*time.Second ||
				o.RenewDeadline != 10*time.Second || o.RetryPeriod != 2*time.Second || o.LeaderElect || c.DisableSync || c.DisableForceDetachOnTimeout ||
				o.HTTPEndpoint != ":8080" || o.EnablePprof || o.ContentType != "application/vnd.kubernetes.protobuf" {
				t.Errorf("defaults = %+v", o)
			}
		}},
		{name: "every flag", args: []string{
			"--kubeconfig=/k", "--max-wait-for-unmount=30s", "--attach-detach-reconcile-sync-period=5m",
			"--disable-attach-detach-reconcile-sync", "--disable-force-detach-on-timeout", "--operation-timeout=1m",
			"--kube-api-qps=200", "--kube-api-burst=300", "--event-qps=5", "--event-burst=7", "--workers=3", "--status-workers=2",
			"--leader-elect", "--leader-elect-lease-duration=20s", "--leader-elect-renew-deadline=15s", "--leader-elect-retry-period=3s",
			"--leader-elect-resource-name=adc", "--leader-elect-resource-namespace=storage", "--http-endpoint=127.0.0.1:9090", "-v=3",
			"--kube-api-content-type=application/json", "--enable-pprof",
		}, check: func(t *testing.T, o *Options) {
			c := o.Controller
			if o.Kubeconfig != "/k" || c.MaxWaitForUnmount != 30*time.Second || c.SyncPeriod != 5*time.Minute || !c.DisableSync ||
				!c.DisableForceDetachOnTimeout || c.OperationTimeout != time.Minute || o.KubeAPIQPS != 200 || o.KubeAPIBurst != 300 ||
				o.EventQPS != 5 || o.EventBurst != 7 || c.Workers != 3 || c.StatusWorkers != 2 || !o.LeaderElect ||
				o.LeaseDuration != 20*time.Second || o.RenewDeadline != 15*time.Second || o.RetryPeriod != 3*time.Second ||
				o.LeaderElectionName != "adc" || o.LeaderElectionNamespace != "storage" || o.HTTPEndpoint != "127.0.0.1:9090" ||
				o.ContentType != "application/json" || !o.EnablePprof {
				t.Errorf("parsed = %+v", o)
			}
		}},
		{name: "version needs nothing else", args: []string{"--version", "--kube-api-qps=0"}, check: func(t *testing.T, o *Options) {
			if !o.ShowVersion {
				t.Error("--version not set")
			}
		}},
		{name: "zero qps", args: []string{"--kube-api-qps=0"}, wantErr: "--kube-api-qps must be positive"},
		{name: "zero burst", args: []string{"--kube-api-burst=0"}, wantErr: "--kube-api-burst must be at least 1"},
		{name: "zero event qps", args: []string{"--event-qps=0"}, wantErr: "--event-qps must be positive"},
		{name: "negative max wait", args: []string{"--max-wait-for-unmount=-1s"}, wantErr: "max wait for unmount must be positive"},
		{name: "zero sync period", args: []string{"--attach-detach-reconcile-sync-period=0"}, wantErr: "reconcile sync period must be positive"},
		{name: "sync period under a second", args: []string{"--attach-detach-reconcile-sync-period=999ms"},
			wantErr: "--attach-detach-reconcile-sync-period must be at least 1s, as in kube-controller-manager, got 999ms"},
		{name: "sync period under a second with the sync disabled, refused as by kube-controller-manager",
			args: []string{"--attach-detach-reconcile-sync-period=0", "--disable-attach-detach-reconcile-sync"}, wantErr: "must be at least 1s"},
		{name: "sync period of a second", args: []string{"--attach-detach-reconcile-sync-period=1s"}},
		{name: "no HTTP server", args: []string{"--http-endpoint="}, check: func(t *testing.T, o *Options) {
			if o.HTTPEndpoint != "" {
				t.Errorf("HTTPEndpoint = %q", o.HTTPEndpoint)
			}
		}},
		{name: "content type neither protobuf nor JSON", args: []string{"--kube-api-content-type=application/yaml"},
			wantErr: `--kube-api-content-type must be application/vnd.kubernetes.protobuf or application/json, got "application/yaml"`},
		{name: "pprof without an HTTP server", args: []string{"--enable-pprof", "--http-endpoint="}, wantErr: "--enable-pprof needs an --http-endpoint"},
		{name: "a certificate without its key", args: []string{"--tls-cert-file=tls.crt"}, wantErr: "--tls-cert-file and --tls-private-key-file go together"},
		{name: "a key without its certificate", args: []string{"--tls-private-key-file=tls.key"}, wantErr: "--tls-cert-file and --tls-private-key-file go together"},
		{name: "a certificate for plain HTTP", args: []string{"--tls-cert-file=tls.crt", "--tls-private-key-file=tls.key", "--http-endpoint-insecure"},
			wantErr: "--tls-cert-file needs an --http-endpoint served over HTTPS"},
		{name: "HTTPS unless plain HTTP is asked for", args: nil, check: func(t *testing.T, o *Options) {
			if o.HTTPEndpointInsecure || o.TLSCertFile != "" || o.TLSPrivateKeyFile != "" {
				t.Errorf("insecure %v, certificate %q, key %q; want HTTPS with a generated certificate", o.HTTPEndpointInsecure, o.TLSCertFile, o.TLSPrivateKeyFile)
			}
		}},
		{name: "the old --bind-address is gone", args: []string{"--bind-address=:8080"}, wantErr: "flag provided but not defined"},
		{name: "help", args: []string{"--help"}, wantErr: "help requested"},
		{name: "zero operation timeout", args: []string{"--operation-timeout=0"}, wantErr: "operation timeout must be positive"},
		{name: "no workers", args: []string{"--workers=0"}, wantErr: "workers must be at least 1"},
		{name: "renew deadline not under lease", args: []string{"--leader-elect", "--leader-elect-renew-deadline=20s"},
			wantErr: "--leader-elect-lease-duration (15s) must be longer than --leader-elect-renew-deadline (20s)"},
		{name: "retry not under renew", args: []string{"--leader-elect", "--leader-elect-retry-period=10s"},
			wantErr: "--leader-elect-renew-deadline (10s) must be longer than --leader-elect-retry-period (10s)"},
		{name: "lease timings ignored without leader election", args: []string{"--leader-elect-renew-deadline=20s"}},
		{name: "empty lease namespace", args: []string{"--leader-elect", "--leader-elect-resource-namespace="}, wantErr: "must not be empty"},
		{name: "per-driver unmount waits and the shutdown taint", args: []string{
			"--max-wait-for-unmount-per-driver=fast.csi.example.com=30s, kubernetes.io/iscsi=never", "--detach-on-shutdown-taint",
		}, check: func(t *testing.T, o *Options) {
			want := map[string]reconciler.DriverUnmountPolicy{
				"fast.csi.example.com": {MaxWait: 30 * time.Second},
				"kubernetes.io/iscsi":  {NeverForce: true},
			}
			if !maps.Equal(o.Controller.MaxWaitForUnmountPerDriver, want) || !o.Controller.DetachOnShutdownTaint {
				t.Errorf("parsed %v, shutdown taint %v; want %v, true", o.Controller.MaxWaitForUnmountPerDriver, o.Controller.DetachOnShutdownTaint, want)
			}
		}},
		{name: "per-driver wait without a driver", args: []string{"--max-wait-for-unmount-per-driver==30s"}, wantErr: "is not DRIVER=DURATION or DRIVER=never"},
		{name: "per-driver wait not a duration", args: []string{"--max-wait-for-unmount-per-driver=d=soon"}, wantErr: "driver d: \"soon\" is neither a positive duration nor never"},
		{name: "per-driver wait of zero", args: []string{"--max-wait-for-unmount-per-driver=d=0s"}, wantErr: "is neither a positive duration nor never"},
		{name: "per-driver wait given twice", args: []string{"--max-wait-for-unmount-per-driver=d=1m,d=never"}, wantErr: "driver d is given twice"},
		{name: "logging defaults to text at verbosity 0, flushed every 5s", check: func(t *testing.T, o *Options) {
			l := o.Logging
			if l.Format != "text" || l.Verbosity != 0 || len(l.VModule) != 0 || l.FlushFrequency.Duration.Duration != 5*time.Second {
				t.Errorf("logging = %+v", l)
			}
		}},
		{name: "the logging flags of Kubernetes components", args: []string{
			"--logging-format=json", "-v=5", "--log-flush-frequency=1s",
		}, check: func(t *testing.T, o *Options) {
			l := o.Logging
			if l.Format != "json" || l.Verbosity != 5 || l.FlushFrequency.Duration.Duration != time.Second {
				t.Errorf("logging = %+v", l)
			}
		}},
		{name: "vmodule", args: []string{"--vmodule=reconciler=5,executor=4"}, check: func(t *testing.T, o *Options) {
			want := logsapi.VModuleConfiguration{{FilePattern: "reconciler", Verbosity: 5}, {FilePattern: "executor", Verbosity: 4}}
			if !slices.Equal(o.Logging.VModule, want) {
				t.Errorf("vmodule = %v, want %v", o.Logging.VModule, want)
			}
		}},
		{name: "an unknown log format", args: []string{"--logging-format=xml"}, wantErr: `--logging-format: Invalid value: "xml": Unsupported log format`},
		{name: "vmodule with JSON", args: []string{"--logging-format=json", "--vmodule=reconciler=5"}, wantErr: "--vmodule: Forbidden: Only supported for text log format"},
		{name: "no log flushes", args: []string{"--log-flush-frequency=0s"}, wantErr: "--log-flush-frequency: Invalid value"},
		{name: "a feature-gated logging flag is not taken", args: []string{"--log-json-split-stream"}, wantErr: "flag provided but not defined"},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "flag provided but not defined"},
		{name: "bad duration", args: []string{"--max-wait-for-unmount=soon"}, wantErr: "invalid value"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFlags(%q): %v", tc.args, err)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}

func TestHelpGroupsTheFlags(t *testing.T) {
	var out strings.Builder
	if _, err := ParseFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseFlags(--help) error = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	kcm := strings.Index(help, "Flags of kube-controller-manager")
	own := strings.Index(help, "Flags of this controller only")
	logging := strings.Index(help, "Logging flags")
	if kcm < 0 || own < kcm || logging < own {
		t.Fatalf("help has not the three groups in order:\n%s", help)
	}
	for _, tc := range []struct {
		flag       string
		start, end int
	}{
		{"--kubeconfig ", kcm, own},
		{"--attach-detach-reconcile-sync-period ", kcm, own},
		{"--leader-elect-resource-namespace ", kcm, own},
		{"--kube-api-qps ", kcm, own},
		{"--kube-api-content-type ", kcm, own},
		{"--enable-pprof", own, logging},
		{"--http-endpoint ", own, logging},
		{"--max-wait-for-unmount ", own, logging},
		{"--workers ", own, logging},
		{"--v ", logging, len(help)},
		{"--logging-format ", logging, len(help)},
		{"--vmodule ", logging, len(help)},
		{"--log-flush-frequency ", logging, len(help)},
	} {
		if i := strings.Index(help, tc.flag); i < tc.start || i > tc.end {
			t.Errorf("%s is not in its group", tc.flag)
		}
	}
}

// TestKlogFileFlagsAreGone: the flags klog.InitFlags registered, which
// Kubernetes components dropped, are refused.
func TestKlogFileFlagsAreGone(t *testing.T) {
	for _, arg := range []string{
		"--log_dir=/tmp", "--log_file=/tmp/log", "--log_file_max_size=10", "--logtostderr", "--alsologtostderr",
		"--add_dir_header", "--one_output", "--skip_headers", "--skip_log_headers", "--stderrthreshold=INFO", "--log_backtrace_at=run.go:1",
	} {
		if _, err := ParseFlags([]string{arg}, io.Discard); err == nil || !strings.Contains(err.Error(), "flag provided but not defined") {
			t.Errorf("ParseFlags(%s) error = %v, want the flag not defined", arg, err)
		}
	}
}

func TestEveryFlagHasAGroup(t *testing.T) {
	fs := newFlagSet(&Options{Logging: logsapi.NewLoggingConfiguration()})
	fs.VisitAll(func(f *flag.Flag) {
		if !kcmFlags[f.Name] && !ownFlags[f.Name] && !isLoggingFlag(f.Name) {
			t.Errorf("--%s is neither kube-controller-manager's, the controller's own nor a logging flag: the help leaves it out", f.Name)
		}
	})
}
