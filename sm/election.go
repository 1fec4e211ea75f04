package sm

import (
	"context"
	"fmt"
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
// this SM is (or becomes) master. A master also learns of the best STANDBY
// SM that beats it (handTo), to hand the subnet over to, as OpenSM does.
func (m *Manager) elect(ctx context.Context, dc *discovery) (yield, handTo *Port) {
	var sms []*Port
	for _, p := range endpoints(dc.order) {
		if p != dc.self && p.Info.CapabilityMask&mad.PortCapIsSM != 0 {
			sms = append(sms, p)
		}
	}
	if len(sms) == 0 {
		return nil, nil
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
	master := m.State() == mad.SMStateMaster
	var best *mad.SMInfo
	for i, x := range infos {
		if x == nil || x.SMState == mad.SMStateNotActive {
			continue
		}
		wins := beats(x.Priority, sms[i].GUID, m.cfg.Priority, self)
		m.log.Debug("sm: other SM", "port", sms[i].GUID, "state", stateName(x.SMState), "priority", x.Priority, "wins", wins)
		switch {
		case x.SMState == mad.SMStateMaster && (!master || wins):
			return sms[i], nil
		case x.SMState != mad.SMStateMaster && wins && !master:
			yield = sms[i]
		case x.SMState == mad.SMStateStandby && wins && master:
			if best == nil || beats(x.Priority, sms[i].GUID, best.Priority, best.GUID) {
				x.GUID = sms[i].GUID
				best, handTo = x, sms[i]
			}
		}
	}
	return yield, handTo
}

// handover asks the standby SM at p to take the subnet over (SMInfo Set,
// HANDOVER); on its answer this SM is STANDBY, polling it.
func (m *Manager) handover(ctx context.Context, p *Port) error {
	b := make([]byte, mad.SMPDataSize)
	x := m.smInfo(false)
	x.Encode(b)
	if _, err := m.smp(ctx, p.Path, mad.MethodSet, mad.SMAttrSMInfo, smHandover, b); err != nil {
		return err
	}
	m.log.Info("sm: handed the subnet over to a better SM", "port", fmt.Sprintf("%#x", p.GUID))
	m.setMaster(p)
	m.setState(mad.SMStateStandby)
	return nil
}

// betterStandby reports whether an SM of the last snapshot that is STANDBY
// beats this master (a light sweep's question: then a heavy sweep hands
// over).
func (m *Manager) betterStandby(ctx context.Context, sn *Subnet) bool {
	m.mu.Lock()
	self := m.guid
	m.mu.Unlock()
	for _, n := range sn.Nodes {
		for _, p := range n.Ports {
			if p == nil || p.GUID == self || (n.Switch != nil && p.Num != 0) || p.Info.CapabilityMask&mad.PortCapIsSM == 0 {
				continue
			}
			b, err := m.smp(ctx, p.Path, mad.MethodGet, mad.SMAttrSMInfo, 0, nil)
			if err != nil {
				continue
			}
			if x, err := mad.ParseSMInfo(b); err == nil && x.SMState == mad.SMStateStandby && beats(x.Priority, p.GUID, m.cfg.Priority, self) {
				return true
			}
		}
	}
	return false
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
