package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestInformersSynced(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", s, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name   string
		kind   controllerKind
		log    string
		want   time.Time
		synced bool
	}{
		{
			name: "upstream: the sync after the attach/detach controller started",
			kind: upstreamController,
			log: `I1129 03:37:14.442412   28993 controllermanager.go:204] "Starting" version="v1.37.1"
I1129 03:37:14.450000   28993 shared_informer.go:531] "Caches are synced"
I1129 03:37:14.457260   28993 attach_detach_controller.go:343] "Starting attach detach controller"
I1129 03:37:14.457286   28993 shared_informer.go:524] "Waiting for caches to sync"
I1129 03:37:16.858886   28993 shared_informer.go:531] "Caches are synced"
`,
			want:   at("2026-11-29 03:37:16.858886"),
			synced: true,
		},
		{
			name: "upstream: still syncing",
			kind: upstreamController,
			log: `I1129 03:37:14.457260   28993 attach_detach_controller.go:343] "Starting attach detach controller"
I1129 03:37:14.457286   28993 shared_informer.go:524] "Waiting for caches to sync"
`,
		},
		{
			name: "this: the rebuild's start",
			kind: thisController,
			log: `I1129 03:25:08.148842   28881 run.go:41] "Starting" version="attachdetach-controller dev"
I1129 03:25:10.903348   28881 controller.go:357] "State rebuilt, starting to reconcile" duration="388.492538ms" desiredVolumes=10001 volumeAttachments=10000 attached=10000
`,
			want:   at("2026-11-29 03:25:10.514855462"),
			synced: true,
		},
		{
			name: "this: still syncing",
			kind: thisController,
			log:  `I1129 03:25:08.148842   28881 run.go:41] "Starting" version="attachdetach-controller dev"` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "controller.log")
			if err := os.WriteFile(path, []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			got, synced, err := informersSynced(path, tt.kind, 2026)
			if err != nil || synced != tt.synced || !got.Equal(tt.want) {
				t.Errorf("informersSynced = %s, %t, %v; want %s, %t", got, synced, err, tt.want, tt.synced)
			}
		})
	}
}
