// Multicast membership through the SA: MCMemberRecord Set (join, which
// creates the group if it does not exist) and Delete (leave), as the Linux
// SA client sends them for rdma_join_multicast on InfiniBand.

package cm

import (
	"context"
	"errors"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// ErrMcastRefused: the SA answered a multicast join or leave with an error
// status (the join's parameters do not fit the group, a leave of a group
// the port is not in, ...); the error names the status.
var ErrMcastRefused = errors.New("cm: multicast membership refused by the SA")

// JoinMulticast asks the port's SA to make rec.PortGID a member of group
// rec.MGID (SubnAdmSet(MCMemberRecord)) with rec's components named by mask
// (mad.MCMemberRecComp*: at least PortGID and JoinState); the SA creates
// the group if it does not exist. It returns the SA's record: the group's
// MLID, Q_Key, MTU, rate, SL, P_Key and the member's join state. The error
// wraps ErrNoSA (no answer, or no SA on the port), ErrMcastRefused (an
// error status) or ctx's error.
func (m *Manager) JoinMulticast(ctx context.Context, rec mad.MCMemberRecord, mask uint64) (mad.MCMemberRecord, error) {
	return m.mcMember(ctx, mad.MethodSet, rec, mask)
}

// LeaveMulticast asks the port's SA to take the join states rec.JoinState
// (all of them if mask lacks mad.MCMemberRecCompJoinState) of port
// rec.PortGID out of group rec.MGID (SubnAdmDelete(MCMemberRecord)); the
// SA deletes the group with its last member. Errors as JoinMulticast's.
func (m *Manager) LeaveMulticast(ctx context.Context, rec mad.MCMemberRecord, mask uint64) error {
	_, err := m.mcMember(ctx, mad.MethodDelete, rec, mask)
	return err
}

// mcMember sends one MCMemberRecord request and waits for its answer,
// retransmitting as saQuery does.
func (m *Manager) mcMember(ctx context.Context, method mad.Method, rec mad.MCMemberRecord, mask uint64) (mad.MCMemberRecord, error) {
	to, err := m.saPath()
	if err != nil {
		return mad.MCMemberRecord{}, err
	}
	timeout, retries := DefaultSATimeout, DefaultSARetries
	if dl, ok := ctx.Deadline(); ok {
		if per := time.Until(dl) * 9 / 10 / time.Duration(retries+1); per < timeout {
			timeout = max(per, time.Millisecond)
		}
	}
	w := &saWait{ch: make(chan []byte, 8)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return mad.MCMemberRecord{}, errf(ErrClosed, "manager")
	}
	tid := m.nextTIDLocked()
	m.sa[tid] = w
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.sa, tid)
		m.mu.Unlock()
	}()
	var req [mad.Size]byte
	s, _ := mad.NewSAMAD(req[:], method, mad.SAAttrMCMemberRecord, tid, &mad.SAHeader{ComponentMask: mask})
	rec.Encode(s.Data())
	for try := range retries + 1 {
		m.send(to, req[:])
		timer := time.NewTimer(timeout)
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return mad.MCMemberRecord{}, saSilent(ctx, to.DLID, try+1)
			case <-timer.C:
				break wait
			case b := <-w.ch:
				r, done, err := mcAnswer(method, mad.SAMAD(b))
				if !done {
					continue
				}
				timer.Stop()
				return r, err
			}
		}
	}
	return mad.MCMemberRecord{}, errf(ErrNoSA, "no answer from the SA at LID %d after %d tries of %v", to.DLID, retries+1, timeout)
}

// mcAnswer takes one SA MAD for an MCMemberRecord request of method: done
// is false for a MAD that is not its answer (another method), else the
// record or the error.
func mcAnswer(method mad.Method, a mad.SAMAD) (_ mad.MCMemberRecord, done bool, _ error) {
	want := mad.MethodGetResp
	if method == mad.MethodDelete {
		want = mad.MethodDeleteResp
	}
	if len(a) < mad.Size || a.MAD().Method() != want {
		return mad.MCMemberRecord{}, false, nil
	}
	if st := a.MAD().Status(); st != mad.StatusOK {
		return mad.MCMemberRecord{}, true, errf(ErrMcastRefused, "%v of MCMemberRecord: SA status %s", method, mad.SAStatusName(st))
	}
	r, err := mad.ParseMCMemberRecord(a.Data())
	if err != nil {
		return mad.MCMemberRecord{}, true, errf(ErrMcastRefused, "%v", err)
	}
	return r, true, nil
}
