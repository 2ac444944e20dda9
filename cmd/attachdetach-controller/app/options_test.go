package app

import (
	"io"
	"maps"
	"strings"
	"testing"
	"time"

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
				o.RenewDeadline != 10*time.Second || o.RetryPeriod != 2*time.Second || o.LeaderElect || c.DisableSync || c.DisableForceDetachOnTimeout {
				t.Errorf("defaults = %+v", o)
			}
		}},
		{name: "every flag", args: []string{
			"--kubeconfig=/k", "--max-wait-for-unmount=30s", "--attach-detach-reconcile-sync-period=5m",
			"--disable-attach-detach-reconcile-sync", "--disable-force-detach-on-timeout", "--operation-timeout=1m",
			"--kube-api-qps=200", "--kube-api-burst=300", "--event-qps=5", "--event-burst=7", "--workers=3", "--status-workers=2",
			"--leader-elect", "--leader-elect-lease-duration=20s", "--leader-elect-renew-deadline=15s", "--leader-elect-retry-period=3s",
			"--leader-elect-resource-name=adc", "--leader-elect-resource-namespace=storage", "--bind-address=127.0.0.1:9090", "-v=3",
		}, check: func(t *testing.T, o *Options) {
			c := o.Controller
			if o.Kubeconfig != "/k" || c.MaxWaitForUnmount != 30*time.Second || c.SyncPeriod != 5*time.Minute || !c.DisableSync ||
				!c.DisableForceDetachOnTimeout || c.OperationTimeout != time.Minute || o.KubeAPIQPS != 200 || o.KubeAPIBurst != 300 ||
				o.EventQPS != 5 || o.EventBurst != 7 || c.Workers != 3 || c.StatusWorkers != 2 || !o.LeaderElect ||
				o.LeaseDuration != 20*time.Second || o.RenewDeadline != 15*time.Second || o.RetryPeriod != 3*time.Second ||
				o.LeaderElectionName != "adc" || o.LeaderElectionNamespace != "storage" || o.BindAddress != "127.0.0.1:9090" {
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
		{name: "zero sync period with the sync disabled", args: []string{"--attach-detach-reconcile-sync-period=0", "--disable-attach-detach-reconcile-sync"}},
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
