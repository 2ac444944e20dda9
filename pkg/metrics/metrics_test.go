package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStateGaugesAndOperations(t *testing.T) {
	m := New()
	err := m.RegisterState(StateSource{
		DesiredVolumes:   func() int { return 3 },
		Attachments:      func() (int, int) { return 5, 4 },
		ReconcileBacklog: func() int { return 2 },
	})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveOperation("attach", time.Now(), nil)
	m.ObserveOperation("detach", time.Now(), errors.New("boom"))
	want := `
# HELP attachdetach_controller_attached_volumes VolumeAttachments the external-attacher marked attached.
# TYPE attachdetach_controller_attached_volumes gauge
attachdetach_controller_attached_volumes 4
# HELP attachdetach_controller_desired_volumes Volumes that some pod with a node needs attached.
# TYPE attachdetach_controller_desired_volumes gauge
attachdetach_controller_desired_volumes 3
# HELP attachdetach_controller_operations_total Attach and detach operations that finished, by operation and result.
# TYPE attachdetach_controller_operations_total counter
attachdetach_controller_operations_total{operation="attach",result="success"} 1
attachdetach_controller_operations_total{operation="detach",result="error"} 1
# HELP attachdetach_controller_reconcile_queue_length Volumes waiting to be reconciled.
# TYPE attachdetach_controller_reconcile_queue_length gauge
attachdetach_controller_reconcile_queue_length 2
# HELP attachdetach_controller_volume_attachments VolumeAttachments known to the controller, in any state.
# TYPE attachdetach_controller_volume_attachments gauge
attachdetach_controller_volume_attachments 5
`
	names := []string{
		"attachdetach_controller_attached_volumes", "attachdetach_controller_desired_volumes",
		"attachdetach_controller_operations_total", "attachdetach_controller_reconcile_queue_length",
		"attachdetach_controller_volume_attachments",
	}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}
