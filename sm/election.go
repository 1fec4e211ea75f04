package sm

import (
	"context"
	"sync"

	"github.com/softrdma/softrdma/wire/mad"
)

// beats reports whether an SM with (pa, ga) wins the election against one
// with (pb, gb): the higher priority, then the lower port GUID (IBTA
// 14.4.1.1).
func beats(pa uint8, ga uint64, pb uint8, gb uint64) bool {
	if pa != pb {
		return pa > pb
	}
	return ga < gb
}

// elect reads SMInfo from every other port of the subnet that says IsSM
// and returns the port of an SM this one yields to: a MASTER, or a better
// SM that is DISCOVERING or STANDBY when there is no master. nil means
// this SM is (or becomes) master.
func (m *Manager) elect(ctx context.Context, dc *discovery) *Port {
	var sms []*Port
	for _, p := range endpoints(dc.order) {
		if p != dc.self && p.Info.CapabilityMask&mad.PortCapIsSM != 0 {
			sms = append(sms, p)
		}
	}
	if len(sms) == 0 {
		return nil
	}
	infos := make([]*mad.SMInfo, len(sms))
	var mu sync.Mutex
	parallel(len(sms), func(i int) {
		b, err := m.smp(ctx, sms[i].Path, mad.MethodGet, mad.SMAttrSMInfo, 0, nil)
		if err != nil {
			m.log.Debug("sm: SMInfo of another SM", "port", sms[i].GUID, "err", err)
			return
		}
		x, err := mad.ParseSMInfo(b)
		if err == nil {
			mu.Lock()
			infos[i] = &x
			mu.Unlock()
		}
	})
	self := dc.self.GUID
	var yield *Port
	for i, x := range infos {
		if x == nil || x.SMState == mad.SMStateNotActive {
			continue
		}
		wins := beats(x.Priority, sms[i].GUID, m.cfg.Priority, self)
		m.log.Debug("sm: other SM", "port", sms[i].GUID, "state", stateName(x.SMState), "priority", x.Priority, "wins", wins)
		switch {
		case x.SMState == mad.SMStateMaster && (m.State() != mad.SMStateMaster || wins):
			return sms[i]
		case x.SMState != mad.SMStateMaster && wins && m.State() != mad.SMStateMaster:
			yield = sms[i]
		}
	}
	return yield
}

// pollMaster reads the master's SMInfo as a standby SM does; false if it
// did not answer as a master (gone, or no longer master).
func (m *Manager) pollMaster(ctx context.Context) bool {
	m.mu.Lock()
	p := m.master
	m.mu.Unlock()
	if p == nil {
		return false
	}
	b, err := m.smp(ctx, p.Path, mad.MethodGet, mad.SMAttrSMInfo, 0, nil)
	if err != nil {
		return false
	}
	x, err := mad.ParseSMInfo(b)
	return err == nil && x.SMState == mad.SMStateMaster
}
