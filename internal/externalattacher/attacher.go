// Package externalattacher runs the upstream CSI external-attacher (csi-attacher, as
// built by hack/build-tools.sh) as a child process against a kubeconfig and a CSI
// driver's unix socket, and prepares the API objects and permissions it needs.
//
// csi-attacher watches the VolumeAttachments whose spec.attacher is the name its
// driver reports from GetPluginInfo. To attach one it reads the PersistentVolume named
// in spec.source (adding the finalizer external-attacher/<driver> to it), the node's
// CSINode for the driver's node ID (attaching fails while the CSINode or its driver
// entry is missing), adds the same finalizer and the annotation
// csi.alpha.kubernetes.io/node-id to the VolumeAttachment, calls ControllerPublishVolume
// and patches status.attached, status.attachmentMetadata or status.attachError. When
// the VolumeAttachment is deleted it calls ControllerUnpublishVolume, removes its
// finalizer, or writes status.detachError and retries with backoff.
package externalattacher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// readyLine is what csi-attacher v4.13.0 logs once it has connected to the driver,
// learned its name and capabilities, and starts its controller.
const readyLine = `"Starting CSI attacher"`

// stopGracePeriod is how long Stop waits after SIGTERM before SIGKILL.
const stopGracePeriod = 5 * time.Second

// Options configures a csi-attacher process. Zero durations and counts leave
// csi-attacher's own defaults in place.
type Options struct {
	// Binary is the csi-attacher executable; by default the pinned one (see
	// binaries.Tool), built on first use.
	Binary string
	// Kubeconfig is the path of the kubeconfig csi-attacher uses. Required.
	Kubeconfig string
	// CSIAddress is the driver's socket, a path or unix:///path. Required.
	CSIAddress string
	// LogFile receives csi-attacher's output, appended. Required.
	LogFile string
	// Verbosity is csi-attacher's -v; 0 means 4, which logs every attach and detach step.
	Verbosity int
	// Timeout bounds each ControllerPublish/Unpublish call (--timeout, 15s upstream).
	Timeout time.Duration
	// WorkerThreads is --worker-threads (10 upstream).
	WorkerThreads uint
	// RetryIntervalStart and RetryIntervalMax bound the exponential backoff after a
	// failed attach or detach (--retry-interval-start 1s, --retry-interval-max 5m upstream).
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Resync is the informers' resync period (--resync, 10m upstream).
	Resync time.Duration
	// KubeAPIQPS and KubeAPIBurst are the client rate limits (5 and 10 upstream).
	KubeAPIQPS   float64
	KubeAPIBurst int
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// Args returns csi-attacher's command line for opts, without the binary. Leader
// election stays off: one csi-attacher per driver.
func (opts Options) Args() []string {
	args := []string{
		"--kubeconfig=" + opts.Kubeconfig,
		"--csi-address=" + opts.CSIAddress,
		"--leader-election=false",
		"--v=" + strconv.Itoa(cmp.Or(opts.Verbosity, 4)),
	}
	durations := []struct {
		flag  string
		value time.Duration
	}{
		{"timeout", opts.Timeout},
		{"retry-interval-start", opts.RetryIntervalStart},
		{"retry-interval-max", opts.RetryIntervalMax},
		{"resync", opts.Resync},
	}
	for _, d := range durations {
		if d.value > 0 {
			args = append(args, "--"+d.flag+"="+d.value.String())
		}
	}
	if opts.WorkerThreads > 0 {
		args = append(args, "--worker-threads="+strconv.FormatUint(uint64(opts.WorkerThreads), 10))
	}
	if opts.KubeAPIQPS > 0 {
		args = append(args, "--kube-api-qps="+strconv.FormatFloat(opts.KubeAPIQPS, 'f', -1, 64))
	}
	if opts.KubeAPIBurst > 0 {
		args = append(args, "--kube-api-burst="+strconv.Itoa(opts.KubeAPIBurst))
	}
	return append(args, opts.ExtraArgs...)
}

// Attacher is a running csi-attacher process.
type Attacher struct {
	proc *proc.Process
}

// Start runs csi-attacher in its own process group and waits until it has connected
// to the driver and started its controller, or ctx ends. The process outlives ctx; end
// it with Stop. It exits by itself when it loses the driver's socket, so stop it
// before the driver.
func Start(ctx context.Context, opts Options) (*Attacher, error) {
	if opts.Kubeconfig == "" || opts.CSIAddress == "" || opts.LogFile == "" {
		return nil, errors.New("start csi-attacher: Kubeconfig, CSIAddress and LogFile are required")
	}
	binary := opts.Binary
	if binary == "" {
		var err error
		if binary, err = binaries.Tool(ctx, binaries.CSIAttacher); err != nil {
			return nil, fmt.Errorf("start csi-attacher: %w", err)
		}
	}
	p, err := proc.Start("csi-attacher", opts.LogFile, binary, opts.Args()...)
	if err != nil {
		return nil, err
	}
	a := &Attacher{proc: p}
	klog.FromContext(ctx).V(1).Info("Started csi-attacher", "pid", p.Pid(), "csiAddress", opts.CSIAddress, "log", opts.LogFile)
	if err := p.WaitReady(ctx, readyLine); err != nil {
		a.Stop()
		return nil, fmt.Errorf("start csi-attacher (log %s): %w", opts.LogFile, err)
	}
	return a, nil
}

// Pid is the process ID, also the ID of its process group.
func (a *Attacher) Pid() int { return a.proc.Pid() }

// LogFile is the path of the process log.
func (a *Attacher) LogFile() string { return a.proc.LogPath() }

// Done is closed when the process has exited.
func (a *Attacher) Done() <-chan struct{} { return a.proc.Done() }

// Err returns how the process exited, after Done is closed.
func (a *Attacher) Err() error { return a.proc.Err() }

// Stop sends SIGTERM to the process group, then SIGKILL if it is still there after a
// few seconds, and waits for the process. It is safe to call more than once.
func (a *Attacher) Stop() {
	_ = a.proc.Stop(stopGracePeriod)
}

// LogTail returns the last lines of the process log.
func (a *Attacher) LogTail(lines int) string { return a.proc.LogTail(lines) }
