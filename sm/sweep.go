package sm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// Sweep runs one heavy sweep: it discovers the subnet, negotiates with the
// other SMs it finds, and as master assigns LIDs, programs the switches
// and brings every linked port to ACTIVE, then publishes the Subnet. It
// returns an error wrapping ErrNotMaster if a better SM is master (this
// one is then STANDBY). If some node refused a setting, the snapshot is
// published all the same and the error returned.
func (m *Manager) Sweep(ctx context.Context) error {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(m.ctx, cancel)()
	defer cancel()
	start := time.Now()
	sets, lost := m.st.sets.Load(), m.st.timeouts.Load()
	dc, err := m.discover(ctx)
	if err != nil {
		return err
	}
	if n := m.st.timeouts.Load() - lost; n > 0 {
		m.log.Warn("sm: discovery went on without some answers", "unanswered", n, "nodes", len(dc.order))
	}
	m.mu.Lock()
	m.guid = dc.self.GUID
	m.mu.Unlock()
	// A master that meets another master which beats it (a partition
	// healed) steps down; one that meets a better standby hands over.
	other, handTo := m.elect(ctx, dc)
	switch {
	case other != nil:
		m.setMaster(other)
		m.setState(mad.SMStateStandby)
		return fmt.Errorf("%w: port %#x", ErrNotMaster, other.GUID)
	case handTo != nil:
		if err := m.handover(ctx, handTo); err == nil {
			return fmt.Errorf("%w: handed over to port %#x", ErrNotMaster, handTo.GUID)
		}
	}
	m.setState(mad.SMStateMaster)
	m.setMaster(nil)
	eps := endpoints(dc.order)
	lids, top := m.assignLIDs(eps)
	smLID := lids[dc.self.GUID]
	m.mu.Lock()
	m.smLID = smLID
	m.mu.Unlock()
	lfts, engine := m.computeLFTs(dc.order, eps, lids, top)
	perr := m.program(ctx, dc, eps, lids, smLID, top, lfts)
	if err := ctx.Err(); err != nil {
		return err
	}
	// A node that refused a setting does not hold back the rest: the
	// snapshot is published, the error returned, and Run sweeps again.
	m.sweeps++
	sn := &Subnet{Prefix: m.cfg.Prefix, SMLID: smLID, SMKey: m.cfg.SMKey, Sweep: m.sweeps, Nodes: dc.order}
	sn.Index()
	m.snap.Store(sn)
	m.kickMcast() // the groups' trees over the new subnet
	d := time.Since(start)
	m.st.sweeps.Add(1)
	m.st.last.Store(int64(d))
	m.st.lastSets.Store(m.st.sets.Load() - sets)
	m.log.Info("sm: heavy sweep done", "sweep", m.sweeps, "nodes", len(dc.order), "lids", len(lids),
		"routing", engine, "sets", m.st.sets.Load()-sets, "took", d.Round(time.Microsecond))
	return perr
}

// program sets what the sweep decided, in the order OpenSM does: the
// ports' LIDs and SM LID, the switches' SwitchInfo and forwarding tables,
// the partition and QoS policy, then every linked port to ARMED and then
// ACTIVE. It skips what already
// holds, so that a sweep of an unchanged subnet sets nothing.
func (m *Manager) program(ctx context.Context, dc *discovery, eps []*Port, lids map[uint64]uint16, smLID, top uint16, lfts map[*Node][]byte) error {
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	setPI := func(p *Port, pi mad.PortInfo) bool {
		b := make([]byte, mad.SMPDataSize)
		pi.Encode(b)
		r, err := m.smp(ctx, p.Path, mad.MethodSet, mad.SMAttrPortInfo, uint32(p.Num), b)
		if err != nil {
			fail(err)
			return false
		}
		got, _ := mad.ParsePortInfo(r)
		mu.Lock()
		p.Info = got
		mu.Unlock()
		return true
	}
	// 1. LIDs, LMC, SM LID and prefix of every endpoint.
	parallel(len(eps), func(i int) {
		p := eps[i]
		lid, ok := lids[p.GUID]
		if !ok || m.portLIDsOK(p, lid, smLID) {
			return
		}
		pi := p.Info
		pi.LID, pi.LMC, pi.MasterSMLID, pi.GIDPrefix = lid, m.lmcOf(p), smLID, m.cfg.Prefix
		if m.cfg.MKey != 0 { // else the ports keep what they have
			pi.MKey, pi.MKeyProtectBits, pi.MKeyLeasePeriod = m.cfg.MKey, m.cfg.MKeyProtectBits, m.cfg.MKeyLeasePeriod
		}
		pi.PortState, pi.PortPhysicalState = mad.PortStateNoChange, mad.PhysStateNoChange
		pi.LinkWidthEnabled, pi.LinkSpeedEnabled = 0, 0
		if setPI(p, pi) && (p.Info.LID != lid || p.Info.MasterSMLID != smLID) {
			fail(fmt.Errorf("sm: %s port %d kept LID %d SM LID %d after Set", p.Node.Desc, p.Num, p.Info.LID, p.Info.MasterSMLID))
		}
	})
	// 2. SwitchInfo and the LFT blocks that changed.
	var sws []*Node
	for _, n := range dc.order {
		if n.Switch != nil {
			sws = append(sws, n)
		}
	}
	parallel(len(sws), func(i int) {
		n := sws[i]
		si := *n.Switch
		if si.LinearFDBTop != top || si.PortStateChange {
			si.LinearFDBTop = top
			b := make([]byte, mad.SMPDataSize)
			si.Encode(b) // PortStateChange as read: writing 1 clears it
			r, err := m.smp(ctx, n.Path, mad.MethodSet, mad.SMAttrSwitchInfo, 0, b)
			if err != nil {
				fail(err)
				return
			}
			got, _ := mad.ParseSwitchInfo(r)
			*n.Switch = got
		}
		lft := lfts[n]
		if int(top) >= int(si.LinearFDBCap) && si.LinearFDBCap != 0 {
			fail(fmt.Errorf("sm: switch %s: LID %d beyond its LFT of %d entries", n.Desc, top, si.LinearFDBCap))
		}
		m.mu.Lock()
		old := m.lfts[n.Info.NodeGUID]
		m.mu.Unlock()
		nblk := len(lft) / mad.LinearFTSize
		ok := make([]bool, nblk)
		parallel(nblk, func(b int) {
			blk := lft[b*mad.LinearFTSize : (b+1)*mad.LinearFTSize]
			if len(old) >= (b+1)*mad.LinearFTSize && bytes.Equal(old[b*mad.LinearFTSize:(b+1)*mad.LinearFTSize], blk) {
				ok[b] = true
				return
			}
			if _, err := m.smp(ctx, n.Path, mad.MethodSet, mad.SMAttrLinearFT, uint32(b), blk); err != nil {
				fail(err)
				return
			}
			ok[b] = true
		})
		prog := make([]byte, len(lft))
		for b := range nblk {
			src := lft
			if !ok[b] {
				// Unknown: force a rewrite next time.
				src = bytes.Repeat([]byte{0xFE}, len(lft))
			}
			copy(prog[b*mad.LinearFTSize:], src[b*mad.LinearFTSize:(b+1)*mad.LinearFTSize])
		}
		m.mu.Lock()
		m.lfts[n.Info.NodeGUID] = prog
		m.mu.Unlock()
		n.LFT = lft[:int(top)+1]
	})
	// 3. Partition and QoS policy.
	m.programPolicy(ctx, dc, fail)
	// 4. Port states: every linked port to ARMED, then to ACTIVE.
	var linked []*Port
	for _, n := range dc.order {
		for _, p := range n.Ports {
			if p != nil && p.Num != 0 && p.Remote != nil && p.Info.PortPhysicalState == mad.PhysStateLinkUp {
				linked = append(linked, p)
			}
		}
	}
	for _, state := range []uint8{mad.PortStateArmed, mad.PortStateActive} {
		parallel(len(linked), func(i int) {
			p := linked[i]
			if p.Info.PortState >= state || p.Info.PortState == mad.PortStateDown {
				return
			}
			pi := p.Info
			pi.PortState, pi.PortPhysicalState = state, mad.PhysStateNoChange
			pi.LinkWidthEnabled, pi.LinkSpeedEnabled = 0, 0
			if setPI(p, pi) && p.Info.PortState != state {
				fail(fmt.Errorf("sm: %s port %d in state %d after Set to %d", p.Node.Desc, p.Num, p.Info.PortState, state))
			}
		})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(errs) > 0 {
		m.log.Warn("sm: sweep incomplete", "errors", len(errs), "first", errs[0])
		return fmt.Errorf("sm: %d settings failed, the first: %w", len(errs), errs[0])
	}
	return nil
}

// lightSweep reads what tells the SM the subnet changed: every switch's
// SwitchInfo (PortStateChange), every CA port's state, and the SMInfo of
// the other SMs (a better one in STANDBY is handed the subnet). It reports
// whether a heavy sweep is needed.
func (m *Manager) lightSweep(ctx context.Context) bool {
	sn := m.Subnet()
	if sn == nil {
		return true
	}
	m.st.light.Add(1)
	var mu sync.Mutex
	changed := false
	set := func() {
		mu.Lock()
		changed = true
		mu.Unlock()
	}
	var jobs []func()
	for _, n := range sn.Nodes {
		if n.Switch != nil {
			jobs = append(jobs, func() {
				b, err := m.smp(ctx, n.Path, mad.MethodGet, mad.SMAttrSwitchInfo, 0, nil)
				if err != nil {
					set()
					return
				}
				if si, _ := mad.ParseSwitchInfo(b); si.PortStateChange {
					set()
				}
			})
			continue
		}
		for _, p := range n.Ports[1:] {
			if p == nil {
				continue
			}
			jobs = append(jobs, func() {
				b, err := m.smp(ctx, p.Path, mad.MethodGet, mad.SMAttrPortInfo, uint32(p.Num), nil)
				if err != nil {
					set()
					return
				}
				if pi, _ := mad.ParsePortInfo(b); pi.PortState != p.Info.PortState || pi.LID != p.Info.LID {
					set()
				}
			})
		}
	}
	parallel(len(jobs), func(i int) { jobs[i]() })
	return changed || m.betterStandby(ctx, sn)
}

// Run manages the subnet until ctx ends or the Manager is closed: a heavy
// sweep at once, a light sweep every Config.SweepInterval, and a heavy
// sweep when a light sweep or a trap shows a change. As STANDBY it polls
// the master's SMInfo instead, and takes over when the master stops
// answering. It returns ctx's error, or ErrClosed.
func (m *Manager) Run(ctx context.Context) error {
	heavy := true
	failed := false // the last heavy sweep left something unset
	misses := 0
	tick := time.NewTicker(m.cfg.SweepInterval)
	defer tick.Stop()
	for {
		if heavy {
			err := m.Sweep(ctx)
			heavy, failed = false, false
			switch {
			case err == nil, errors.Is(err, ErrNotMaster):
				misses = 0
			case ctx.Err() != nil:
				return ctx.Err()
			case m.ctx.Err() != nil:
				return ErrClosed
			default:
				failed = true
				m.log.Warn("sm: heavy sweep", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.ctx.Done():
			return ErrClosed
		case <-m.trap:
			if m.State() != mad.SMStateStandby {
				heavy = true
			}
		case <-tick.C:
			switch m.State() {
			case mad.SMStateStandby:
				if m.pollMaster(ctx) {
					misses = 0
				} else if misses++; misses >= 3 {
					m.log.Info("sm: the master stopped answering; taking over")
					m.setState(mad.SMStateDiscovering)
					heavy = true
				}
			case mad.SMStateMaster:
				heavy = failed || m.lightSweep(ctx)
			case mad.SMStateNotActive:
			default:
				heavy = true
			}
		}
	}
}

func (m *Manager) setMaster(p *Port) {
	m.mu.Lock()
	m.master = p
	m.mu.Unlock()
}
