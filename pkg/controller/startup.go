package controller

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// waitForCurrentInformers makes sure that the informers hold every fact the
// first decision can rest on, at least as a quorum read from etcd sees it once
// the controller leads: every VolumeAttachment that exists, the record of a CSI
// attachment; and every node at a version no older than the one read, since node
// status is the only record of an iSCSI or Fibre Channel attachment (and of the
// volumes kubelet uses). After a fail-over, the previous leader's last writes
// must be known first, or a single-attach volume could be attached twice, or
// taken out of the status of a node that has it mounted.
func (c *Controller) waitForCurrentInformers(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		missing, err := c.attachmentsMissing(ctx)
		if err != nil {
			logger.Error(err, "Listing VolumeAttachments to check the informer is current; retrying")
			return false, nil
		}
		if missing > 0 {
			logger.Info("VolumeAttachment informer is behind the API server; waiting", "missing", missing)
			return false, nil
		}
		behind, err := c.nodesBehind(ctx)
		if err != nil {
			logger.Error(err, "Listing nodes to check the informer is current; retrying")
			return false, nil
		}
		if behind > 0 {
			logger.Info("Node informer is behind the API server; waiting", "nodesBehind", behind)
			return false, nil
		}
		return true, nil
	})
}

// attachmentsMissing counts the VolumeAttachments that exist and that the
// informer does not hold: an object of the same name with another UID is an
// older one, deleted since.
func (c *Controller) attachmentsMissing(ctx context.Context) (int, error) {
	existing, err := c.listAttachments(ctx)
	if err != nil {
		return 0, err
	}
	missing := 0
	for name, uid := range existing {
		if held, err := c.informers.attachments.Lister().Get(name); err != nil || held.UID != uid {
			missing++
		}
	}
	return missing, nil
}

// listAttachments returns the name and UID of every VolumeAttachment, read from
// etcd.
func (c *Controller) listAttachments(ctx context.Context) (map[string]types.UID, error) {
	out := make(map[string]types.UID)
	err := quorumList(ctx, func(ctx context.Context, opts metav1.ListOptions) ([]storagev1.VolumeAttachment, string, error) {
		list, err := c.client.StorageV1().VolumeAttachments().List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return list.Items, list.Continue, nil
	}, func(va *storagev1.VolumeAttachment) {
		out[va.Name] = va.UID
	})
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return out, nil
}

// nodesBehind counts the nodes that the informer does not hold, or holds at a
// version older than the one listed. A node the informer still holds after its
// deletion only makes the controller more careful until the informer shows the
// deletion.
func (c *Controller) nodesBehind(ctx context.Context) (int, error) {
	behind := 0
	err := quorumList(ctx, func(ctx context.Context, opts metav1.ListOptions) ([]v1.Node, string, error) {
		list, err := c.client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return list.Items, list.Continue, nil
	}, func(listed *v1.Node) {
		held, err := c.informers.nodes.Lister().Get(listed.Name)
		if err != nil || !atLeastVersion(held.ResourceVersion, listed.ResourceVersion) {
			behind++
		}
	})
	return behind, err
}

// quorumList lists every object of a resource, in pages that all belong to the
// first one's quorum read, and hands each to each.
func quorumList[T any](ctx context.Context, list func(context.Context, metav1.ListOptions) ([]T, string, error), each func(*T)) error {
	opts := metav1.ListOptions{Limit: 500}
	for {
		items, next, err := list(ctx, opts)
		if err != nil {
			return err
		}
		for i := range items {
			each(&items[i])
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
	}
}

// atLeastVersion tells whether an object at resourceVersion have is the one at
// want or a later one. Resource versions of one resource are ordered; two that
// cannot be compared must be the same.
func atLeastVersion(have, want string) bool {
	cmp, err := resourceversion.CompareResourceVersion(have, want)
	if err != nil {
		return have == want
	}
	return cmp >= 0
}
