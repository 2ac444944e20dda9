package reconciler

import "github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"

// Queued takes every volume from the queue, in its order, without reconciling it.
func (r *Reconciler) Queued() []volumename.UniqueName {
	var out []volumename.UniqueName
	for r.queue.Len() > 0 {
		name, _ := r.queue.Get()
		r.queue.Done(name)
		out = append(out, name)
	}
	return out
}
