package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// startAttempts bounds retries of a process start that lost a free port to someone else.
const startAttempts = 3

// startEtcd runs a single-member etcd with its data in dir/etcd-data, and returns it
// with its client URL once it reports healthy.
func startEtcd(ctx context.Context, binary, dir, logPath string) (*proc.Process, string, error) {
	var lastErr error
	for range startAttempts {
		p, url, err := startEtcdOnce(ctx, binary, dir, logPath)
		if err == nil {
			return p, url, nil
		}
		lastErr = err
		if ctx.Err() != nil || !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, "", lastErr
}

var errPortTaken = errors.New("port already in use")

// progressNotifyInterval is how often etcd tells watchers its current revision.
const progressNotifyInterval = 100 * time.Millisecond

func startEtcdOnce(ctx context.Context, binary, dir, logPath string) (*proc.Process, string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	dataDir := filepath.Join(dir, "etcd-data")
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, "", fmt.Errorf("clearing etcd data dir: %w", err)
	}
	clientURL := "http://" + hostPort(ports[0])
	peerURL := "http://" + hostPort(ports[1])
	p, err := proc.Start("etcd", logPath, binary,
		"--name=testenv",
		"--data-dir="+dataDir,
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL,
		"--initial-cluster-state=new",
		"--quota-backend-bytes=8589934592",
		"--snapshot-count=1000000",
		// A lone member need not wait a second before electing itself leader.
		"--heartbeat-interval=10",
		"--election-timeout=100",
		// kube-apiserver's watch cache learns that time moved on for resources nobody
		// writes only from etcd's progress notifications (this etcd is too old for
		// progress requests). Without frequent ones, a watch from a recent
		// resourceVersion, or from none, waits for a write to that resource or times
		// out with "Too large resource version".
		"--experimental-watch-progress-notify-interval="+progressNotifyInterval.String(),
		"--logger=zap",
		"--log-outputs=stderr",
	)
	if err != nil {
		return nil, "", err
	}
	if err := waitEtcdHealthy(ctx, p, clientURL); err != nil {
		_ = p.Kill()
		if strings.Contains(p.LogTail(50), "address already in use") {
			return nil, "", fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, "", fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, logPath, p.LogTail(30))
	}
	return p, clientURL, nil
}

func waitEtcdHealthy(ctx context.Context, p *proc.Process, clientURL string) error {
	client := &http.Client{Timeout: time.Second}
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		if err := p.Exited(); err != nil {
			return err
		}
		if etcdHealthy(ctx, client, clientURL) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for etcd at %s: %w", clientURL, ctx.Err())
		case <-ticker.C:
		}
	}
}

func etcdHealthy(ctx context.Context, client *http.Client, clientURL string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var health struct {
		Health string `json:"health"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&health) == nil && health.Health == "true"
}
