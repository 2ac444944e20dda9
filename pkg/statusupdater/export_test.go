package statusupdater

// RecordedNodes returns how many nodes the updater keeps a record for.
func (u *Updater) RecordedNodes() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.perNode)
}
