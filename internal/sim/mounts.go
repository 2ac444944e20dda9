package sim

import (
	"slices"
	"sync"
)

// Mounts is what the simulated kubelets have mounted, by node and unique volume
// name. Safe for concurrent use.
type Mounts struct {
	mu sync.Mutex
	m  map[mount]bool
}

type mount struct{ node, volume string }

// NewMounts returns an empty mount table.
func NewMounts() *Mounts { return &Mounts{m: map[mount]bool{}} }

// Mounted tells whether the volume is mounted on the node.
func (m *Mounts) Mounted(node, volume string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[mount{node, volume}]
}

// Set records that the volume is mounted on the node, or no longer is.
func (m *Mounts) Set(node, volume string, mounted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mounted {
		m.m[mount{node, volume}] = true
	} else {
		delete(m.m, mount{node, volume})
	}
}

// OnNode returns the volumes mounted on a node, sorted.
func (m *Mounts) OnNode(node string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for nv := range m.m {
		if nv.node == node {
			out = append(out, nv.volume)
		}
	}
	slices.Sort(out)
	return out
}
