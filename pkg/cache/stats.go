package cache

import (
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// The read-only counts below are what the metrics report; they take each state's
// lock once.

// Wait is a count of waits under way and the age of the oldest.
type Wait struct {
	Count  int
	Oldest time.Duration
}

func (w *Wait) add(since, now time.Time) {
	w.Count++
	w.Oldest = max(w.Oldest, now.Sub(since))
}

// AttachmentsByPlugin counts the (volume, node) pairs some pod needs, by plugin
// label (volumename.PluginLabel).
func (d *DesiredState) AttachmentsByPlugin() map[string]int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make(map[string]int)
	for name, vol := range d.volumes {
		out[volumename.PluginLabel(name)] += len(vol.nodes)
	}
	return out
}

// PodVolumesByNode counts, by node and then plugin label, the volumes of the pods
// on each node: a volume two pods use counts twice.
func (d *DesiredState) PodVolumesByNode() map[string]map[string]int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make(map[string]map[string]int)
	for name, vol := range d.volumes {
		plugin := volumename.PluginLabel(name)
		for node, att := range vol.nodes {
			if out[node] == nil {
				out[node] = make(map[string]int)
			}
			out[node][plugin] += len(att.pods)
		}
	}
	return out
}

// WaitsForDetach returns the (volume, node) pairs whose pods were told the volume
// is held by another node and still wait for it.
func (d *DesiredState) WaitsForDetach(now time.Time) Wait {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var w Wait
	for _, vol := range d.volumes {
		for _, att := range vol.nodes {
			if !att.waitingSince.IsZero() {
				w.add(att.waitingSince, now)
			}
		}
	}
	return w
}

// AttachedByPlugin counts the (volume, node) pairs some object reports attached,
// by plugin label.
func (s *ActualState) AttachedByPlugin() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]int)
	for name, nodes := range s.pairs {
		for _, p := range nodes {
			if p.attached() {
				out[volumename.PluginLabel(name)]++
			}
		}
	}
	return out
}

// UnmountWaits returns the (volume, node) pairs whose detach waits for kubelet to
// unmount the volume.
func (s *ActualState) UnmountWaits(now time.Time) Wait {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var w Wait
	for _, nodes := range s.pairs {
		for _, p := range nodes {
			if !p.unmountWaitStarted.IsZero() {
				w.add(p.unmountWaitStarted, now)
			}
		}
	}
	return w
}

func (p *pair) attached() bool {
	for _, a := range p.objects {
		if a.Attached {
			return true
		}
	}
	return false
}
