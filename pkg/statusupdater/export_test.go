package statusupdater

// RecordedNodes returns how many nodes the updater keeps a record for.
func (u *Updater) RecordedNodes() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.perNode)
}

// Waiting returns how many confirmations for the node no write has answered yet.
func (u *Updater) Waiting(node string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.waiting[node])
}
