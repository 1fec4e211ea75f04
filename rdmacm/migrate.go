// Moving an ID to another event channel (rdma_migrate_id).

package rdmacm

// MigrateID moves the ID to event channel ch (rdma_migrate_id): its later
// events are posted there, and the events of the ID still queued on its old
// channel (not yet taken with Get) move to ch, in order, as the kernel
// moves an ID's unreported events. A listening ID takes its pending
// connection requests with it, and the new IDs they carry move too; later
// requests create IDs on ch. Events already taken from the old channel
// stay the caller's.
//
// A synchronous ID (created without a channel) and the IDs of Dial and
// Listen, whose channels are their own, cannot be migrated (ErrState); ch
// must not be nil (ErrInvalid) nor closed (ErrClosed).
func (id *ID) MigrateID(ch *EventChannel) error {
	if ch == nil {
		return errf(ErrInvalid, "nil event channel")
	}
	ch.mu.Lock()
	closed, handled := ch.closed, ch.handle != nil
	ch.mu.Unlock()
	switch {
	case closed:
		return errf(ErrClosed, "event channel")
	case handled:
		return errf(ErrState, "the channel belongs to a Dial or Listen connection")
	}
	id.mu.Lock()
	switch {
	case id.state == idDestroyed:
		id.mu.Unlock()
		return errf(ErrClosed, "ID destroyed")
	case id.sync:
		id.mu.Unlock()
		return errf(ErrState, "a synchronous ID has no event channel to leave")
	}
	old := id.ch
	children, err := id.move(old, ch, true)
	id.mu.Unlock()
	if err != nil {
		return err
	}
	// The new IDs of the moved connection requests, after the listener's
	// lock is released (a new ID takes its listener's lock under its own).
	// One the application has moved elsewhere meanwhile stays there.
	for _, c := range children {
		c.move(old, ch, false)
	}
	return nil
}

// move points the ID at ch, if it is on old, and moves its events queued
// on old there (and, if requests, the connection requests it listened
// for, whose IDs it returns).
func (id *ID) move(old, ch *EventChannel, requests bool) ([]*ID, error) {
	id.chMu.Lock()
	defer id.chMu.Unlock()
	if id.ch != old || old == ch {
		return nil, nil
	}
	old.mu.Lock()
	if old.handle != nil {
		old.mu.Unlock()
		return nil, errf(ErrState, "the ID belongs to a Dial or Listen connection")
	}
	var moved []*Event
	var children []*ID
	kept := old.q[:0]
	for _, ev := range old.q {
		switch {
		case ev.ID == id:
			moved = append(moved, ev)
		case requests && ev.Type == EventConnectRequest && ev.ListenID == id:
			moved = append(moved, ev)
			children = append(children, ev.ID)
		default:
			kept = append(kept, ev)
		}
	}
	clear(old.q[len(kept):])
	old.q = kept
	old.mu.Unlock()
	id.ch = ch
	if len(moved) > 0 {
		ch.mu.Lock()
		ch.q = append(ch.q, moved...)
		ch.mu.Unlock()
		ch.wake()
	}
	return children, nil
}
