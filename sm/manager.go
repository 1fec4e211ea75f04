package sm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// Routing engines of Config.Routing.
const (
	RoutingMinHop = "minhop" // shortest paths, balanced over equal-cost ports
	RoutingUpDown = "updn"   // up/down: shortest legal up*down* paths, deadlock-free
)

// DefaultPrefix is the subnet prefix the SM sets when Config.Prefix is 0.
const DefaultPrefix = 0xfe80000000000000

// Defaults of Config.
const (
	DefaultSweepInterval = 10 * time.Second
	DefaultTimeout       = 500 * time.Millisecond
	DefaultRetries       = 3
	DefaultWindow        = 128
)

// Errors of the Manager; test with errors.Is.
var (
	// ErrTimeout means an SMP had no answer after every retry.
	ErrTimeout = errors.New("sm: no answer")
	// ErrUnreachable means the fabric reported an SMP undeliverable.
	ErrUnreachable = errors.New("sm: undeliverable")
	// ErrStatus means a node answered an SMP with a nonzero MAD status.
	ErrStatus = errors.New("sm: error status")
	// ErrNotMaster means the sweep found a better SM: this one is STANDBY.
	ErrNotMaster = errors.New("sm: another SM is master")
)

// Config configures a Manager. The zero value is usable: min-hop routing,
// LMC 0, priority 0, a heavy sweep at start and a light sweep every
// DefaultSweepInterval.
type Config struct {
	// GMP receives every GMP of class SubnAdm (the SA's requests on QP1)
	// that arrives at the SM's port, from the Manager's receive goroutine;
	// it must not block long. nil drops them.
	GMP func(*Datagram)
	// Notice, if not nil, receives every trap's notice the SM's port
	// receives (after the SM repressed it), from the Manager's receive
	// goroutine; it must not block long. The SA forwards them to its
	// subscribers (sa.Attach sets it).
	Notice func(mad.Notice)
	// LMC is the LID mask control of CA ports: each gets 2^LMC LIDs
	// (0-7). Switches get one LID.
	LMC uint8
	// Priority is the SM's priority in master election (0-15).
	Priority uint8
	// SMKey is the SM_Key the SM reports in SMInfo to requesters that
	// present it.
	SMKey uint64
	// MKey is the M_Key the SM sets in every CA port and switch port 0
	// and carries in its SMPs (0: none; the ports' M_Key fields are left
	// as they are).
	// MKeyProtectBits (0-3) says what an SMP without it may still do
	// (IBTA 14.2.4.1: 0 Get all, 1 Get with the M_Key hidden, 2 and 3
	// nothing); MKeyLeasePeriod how many seconds a port keeps its
	// protection after SMPs with the key stop (0: for ever).
	MKey            uint64
	MKeyProtectBits uint8
	MKeyLeasePeriod uint16
	// Prefix is the subnet prefix set in every port; 0 means DefaultPrefix.
	Prefix uint64
	// SweepInterval is the period of light sweeps in Run; 0 means
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// Routing is RoutingMinHop (also "") or RoutingUpDown.
	Routing string
	// Timeout is how long one SMP waits for its answer; 0 means
	// DefaultTimeout. Retries is how many times it is resent after that;
	// 0 means DefaultRetries.
	Timeout time.Duration
	Retries int
	// Window bounds the SMPs outstanding at once; 0 means DefaultWindow.
	Window int
	// Partitions is the partition policy (OpenSM's partitions.conf, read
	// by policy.ParsePartitions) the heavy sweep writes to P_Key tables:
	// CA ports, switch port 0, and the switch ports facing end ports with
	// their partition enforcement bits. nil leaves P_Key tables and
	// enforcement as the ports have them.
	Partitions *policy.Partitions
	// QoS is the QoS policy (opensm.conf's qos options, read by
	// policy.ParseQoS); with QoS.Enabled the heavy sweep writes
	// OperationalVLs, VLHighLimit, SL2VL and VL arbitration tables of CA
	// ports and linked switch ports (port 0 when enhanced). nil, or not
	// enabled, leaves them as they are.
	QoS *policy.QoS
	// Logger receives the SM's messages (nothing per MAD above Debug); nil
	// uses slog.Default().
	Logger *slog.Logger
}

// Stats count what the Manager did.
type Stats struct {
	Sweeps      uint64 // heavy sweeps completed
	LightSweeps uint64
	Sent        uint64 // SMPs sent, retries included
	Sets        uint64 // Set SMPs answered
	Retries     uint64
	Timeouts    uint64 // SMPs that got no answer after every retry
	Traps       uint64 // traps received
	BadMKey     uint64 // traps 256 (an SMP with a wrong M_Key) received
	Unclaimed   uint64 // responses nobody awaited, and MADs of other classes
	GMPs        uint64 // GMPs handed to Config.GMP
	LastSweep   time.Duration
	// LastSets is the number of Set SMPs of the last heavy sweep: 0 when
	// it found the subnet as the previous one left it.
	LastSets uint64
}

// Manager is a subnet manager running on one Transport. Its methods are safe
// for concurrent use; sweeps run one at a time.
type Manager struct {
	t   Transport
	cfg Config
	log *slog.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}
	tid    atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]chan *Datagram // by the low 48 bits of the TID
	smLID   uint16                    // our port's LID, once set
	state   uint8                     // SMState*
	guid    uint64                    // our port's GUID, once known
	act     atomic.Uint32             // SMInfo ActCount
	closed  bool

	trap    chan struct{}               // a trap or handover asks for a heavy sweep
	sweepMu sync.Mutex                  // one sweep at a time
	lids    map[uint64]lidRange         // by port GUID, gone ports included
	lfts    map[uint64][]byte           // LFT as programmed, by switch node GUID
	tables  map[tableKey][]byte         // policy table blocks as programmed
	groups  map[uint16][]uint64         // multicast groups: MLID -> member port GUIDs
	mfts    map[uint64]map[int][]uint16 // MFT blocks as programmed, by switch node GUID
	mcast   chan struct{}               // the groups or the subnet changed
	sweeps  uint64
	snap    atomic.Pointer[Subnet]
	master  *Port // standby: the master's port, as last discovered

	st struct {
		sweeps, light, sent, sets, retries, timeouts, traps, unclaimed, gmps, lastSets, badMKey atomic.Uint64
		last                                                                                    atomic.Int64
	}
}

// New returns a Manager on t with cfg, which starts receiving at once (SMInfo
// requests, traps, GMPs) but sweeps only when asked (Sweep) or run (Run).
// The Manager owns t: Close closes it.
func New(t Transport, cfg Config) (*Manager, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrConfig)
	}
	if cfg.LMC > 7 {
		return nil, fmt.Errorf("%w: LMC %d, at most 7", ErrConfig, cfg.LMC)
	}
	if cfg.MKeyProtectBits > 3 {
		return nil, fmt.Errorf("%w: M_Key protect bits %d, at most 3", ErrConfig, cfg.MKeyProtectBits)
	}
	if cfg.Priority > 15 {
		return nil, fmt.Errorf("%w: priority %d, at most 15", ErrConfig, cfg.Priority)
	}
	switch cfg.Routing {
	case "":
		cfg.Routing = RoutingMinHop
	case RoutingMinHop, RoutingUpDown:
	default:
		return nil, fmt.Errorf("%w: routing %q (want %q or %q)", ErrConfig, cfg.Routing, RoutingMinHop, RoutingUpDown)
	}
	if cfg.Prefix == 0 {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Retries <= 0 {
		cfg.Retries = DefaultRetries
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{t: t, cfg: cfg, log: log, ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, cfg.Window), pending: map[uint64]chan *Datagram{},
		state: mad.SMStateDiscovering, trap: make(chan struct{}, 1),
		lids: map[uint64]lidRange{}, lfts: map[uint64][]byte{}, tables: map[tableKey][]byte{},
		groups: map[uint16][]uint64{}, mfts: map[uint64]map[int][]uint16{}, mcast: make(chan struct{}, 1)}
	m.wg.Add(2)
	go m.recvLoop()
	go m.mcastLoop()
	return m, nil
}

// Close stops the Manager (a running Run or Sweep returns), closes its
// Transport, and waits for its goroutines.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	err := m.t.Close()
	m.wg.Wait()
	return err
}

// Subnet returns the snapshot the last heavy sweep published, or nil
// before the first one completed.
func (m *Manager) Subnet() *Subnet { return m.snap.Load() }

// State returns the SM's state (mad.SMStateDiscovering, Standby or Master).
func (m *Manager) State() uint8 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Stats returns the Manager's counters.
func (m *Manager) Stats() Stats {
	return Stats{
		Sweeps: m.st.sweeps.Load(), LightSweeps: m.st.light.Load(), Sent: m.st.sent.Load(),
		Sets: m.st.sets.Load(), Retries: m.st.retries.Load(), Timeouts: m.st.timeouts.Load(),
		Traps: m.st.traps.Load(), BadMKey: m.st.badMKey.Load(), Unclaimed: m.st.unclaimed.Load(), GMPs: m.st.gmps.Load(),
		LastSweep: time.Duration(m.st.last.Load()), LastSets: m.st.lastSets.Load(),
	}
}

func (m *Manager) setState(s uint8) {
	m.mu.Lock()
	old := m.state
	m.state = s
	m.mu.Unlock()
	if old != s {
		m.log.Info("sm: state", "state", stateName(s))
	}
}

func stateName(s uint8) string {
	switch s {
	case mad.SMStateNotActive:
		return "NOTACTIVE"
	case mad.SMStateDiscovering:
		return "DISCOVERING"
	case mad.SMStateStandby:
		return "STANDBY"
	case mad.SMStateMaster:
		return "MASTER"
	}
	return fmt.Sprint(s)
}

const tidMask = 1<<48 - 1 // ibsim marks the top 16 bits with the client's slot

// recvLoop is the only reader of the Transport: it hands responses to the
// requests awaiting them, answers SMInfo, represses traps and passes SA
// GMPs to Config.GMP.
func (m *Manager) recvLoop() {
	defer m.wg.Done()
	for {
		d, err := m.t.Recv(m.ctx)
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			m.log.Warn("sm: receive", "err", err)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if len(d.MAD) != mad.Size {
			m.st.unclaimed.Add(1)
			continue
		}
		mm := mad.MAD(d.MAD)
		class, method := mm.MgmtClass(), mm.Method()
		if method&0x80 != 0 || d.Status != 0 {
			m.mu.Lock()
			ch := m.pending[mm.TransactionID()&tidMask]
			m.mu.Unlock()
			if ch != nil {
				select {
				case ch <- d:
				default:
				}
				continue
			}
		}
		switch {
		case class == mad.ClassSubnAdm:
			if m.cfg.GMP != nil {
				m.st.gmps.Add(1)
				m.cfg.GMP(d)
			} else {
				m.st.unclaimed.Add(1)
			}
		case class == mad.ClassSubnLID || class == mad.ClassSubnDirected:
			switch {
			case method == mad.MethodTrap:
				m.onTrap(d)
			case mm.AttributeID() == mad.SMAttrSMInfo && (method == mad.MethodGet || method == mad.MethodSet):
				m.onSMInfo(d)
			default:
				m.st.unclaimed.Add(1)
			}
		default:
			m.st.unclaimed.Add(1)
		}
	}
}

// onTrap answers a trap with TrapRepress and asks for a heavy sweep if it
// says the subnet changed (128: a link state change, 144: a capability
// change).
func (m *Manager) onTrap(d *Datagram) {
	m.st.traps.Add(1)
	nt, err := mad.ParseNotice(mad.SMP(d.MAD).Data())
	if err != nil {
		return
	}
	m.log.Debug("sm: trap", "number", nt.TrapNumber, "issuer", nt.IssuerLID)
	if nt.IsGeneric && nt.TrapNumber == mad.TrapBadMKey {
		m.st.badMKey.Add(1)
		m.log.Warn("sm: an SMP with a wrong M_Key reached a port", "issuer", nt.IssuerLID)
	}
	r := append([]byte(nil), d.MAD...)
	mad.MAD(r).SetMethod(mad.MethodTrapRepress)
	m.mu.Lock()
	slid := m.smLID
	m.mu.Unlock()
	if d.SLID != 0 && d.SLID != mad.PermissiveLID {
		m.t.Send(&Datagram{SLID: slid, DLID: d.SLID, PKey: 0xFFFF, MAD: r})
	}
	if nt.IsGeneric && (nt.TrapNumber == mad.TrapLinkStateChange || nt.TrapNumber == mad.TrapCapabilityMaskChanged) {
		m.kick()
	}
	if m.cfg.Notice != nil {
		m.cfg.Notice(nt)
	}
}

// kick asks Run for a heavy sweep.
func (m *Manager) kick() {
	select {
	case m.trap <- struct{}{}:
	default:
	}
}

// smInfo is what this SM says of itself.
func (m *Manager) smInfo(withKey bool) mad.SMInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := mad.SMInfo{GUID: m.guid, ActCount: m.act.Load(), Priority: m.cfg.Priority, SMState: m.state}
	if withKey {
		x.SMKey = m.cfg.SMKey
	}
	return x
}

// SMInfo Set attribute modifiers (IBTA 14.4.1).
const (
	smHandover    = 1
	smAcknowledge = 2
	smDisable     = 3
	smStandby     = 4
	smDiscover    = 5
)

// onSMInfo answers another SM's SMInfo Get or Set.
func (m *Manager) onSMInfo(d *Datagram) {
	mm := mad.MAD(d.MAD)
	s := mad.SMP(d.MAD)
	req, _ := mad.ParseSMInfo(s.Data())
	if mm.Method() == mad.MethodSet {
		switch mm.AttributeModifier() {
		case smHandover:
			m.log.Info("sm: handover from another SM")
			m.setState(mad.SMStateMaster)
			m.kick()
		case smStandby:
			m.setState(mad.SMStateStandby)
		case smDisable:
			m.setState(mad.SMStateNotActive)
		case smDiscover:
			m.setState(mad.SMStateDiscovering)
			m.kick()
		}
	}
	x := m.smInfo(req.SMKey == m.cfg.SMKey && m.cfg.SMKey != 0)
	r := append([]byte(nil), d.MAD...)
	rs := mad.SMP(r)
	rm := mad.MAD(r)
	rm.SetMethod(mad.MethodGetResp)
	if rs.Directed() {
		rs.SetStatus(0)
		rs.SetDirection(true)
	} else {
		rm.SetStatus(0)
	}
	clear(rs.Data())
	x.Encode(rs.Data())
	m.mu.Lock()
	slid := m.smLID
	m.mu.Unlock()
	out := &Datagram{SLID: d.DLID, DLID: d.SLID, SQP: d.DQP, DQP: d.SQP, PKey: 0xFFFF, MAD: r}
	if out.SLID == mad.PermissiveLID && !rs.Directed() {
		out.SLID = slid
	}
	if err := m.t.Send(out); err != nil {
		m.log.Debug("sm: SMInfo answer", "err", err)
	}
}

// smp sends a directed-route SMP along path (the ports hop by hop from the
// SM's port; empty for the SM's own node) and returns the answer's data. It
// waits for a place in the window, and resends after Config.Timeout up to
// Config.Retries times.
func (m *Manager) smp(ctx context.Context, path []byte, method mad.Method, attr mad.AttributeID, mod uint32, data []byte) ([]byte, error) {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.ctx.Done():
		return nil, ErrClosed
	}
	defer func() { <-m.sem }()
	full := make([]byte, 0, len(path)+1)
	full = append(append(full, 0), path...)
	ch := make(chan *Datagram, 1)
	for try := 0; try <= m.cfg.Retries; try++ {
		tid := m.tid.Add(1) & tidMask
		b := make([]byte, mad.Size)
		s, err := mad.NewDirectedSMP(b, method, attr, mod, tid, full)
		if err != nil {
			return nil, err
		}
		copy(s.Data(), data)
		s.SetMKey(m.cfg.MKey)
		m.mu.Lock()
		m.pending[tid] = ch
		m.mu.Unlock()
		if try > 0 {
			m.st.retries.Add(1)
		}
		m.st.sent.Add(1)
		err = m.t.Send(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, PKey: 0xFFFF, MAD: b})
		var r *Datagram
		if err == nil {
			timer := time.NewTimer(m.cfg.Timeout)
			select {
			case r = <-ch:
			case <-timer.C:
			case <-ctx.Done():
				err = ctx.Err()
			case <-m.ctx.Done():
				err = ErrClosed
			}
			timer.Stop()
		} else {
			// A full queue (the fabric's ErrBusy): wait as for a timeout.
			m.log.Debug("sm: send", "err", err)
			select {
			case <-time.After(m.cfg.Timeout / 4):
			case <-ctx.Done():
			}
			err = ctx.Err()
		}
		m.mu.Lock()
		delete(m.pending, tid)
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if r == nil {
			continue
		}
		if r.Status != 0 {
			return nil, fmt.Errorf("%w: %v %s along %v", ErrUnreachable, method, mad.AttrName(mad.ClassSubnDirected, attr), path)
		}
		rs := mad.SMP(r.MAD)
		if st := rs.Status(); st != 0 {
			return nil, fmt.Errorf("%w %#x: %v %s modifier %#x along %v", ErrStatus, st, method, mad.AttrName(mad.ClassSubnDirected, attr), mod, path)
		}
		if method == mad.MethodSet {
			m.st.sets.Add(1)
		}
		m.act.Add(1)
		return append([]byte(nil), rs.Data()...), nil
	}
	m.st.timeouts.Add(1)
	return nil, fmt.Errorf("%w: %v %s modifier %#x along %v", ErrTimeout, method, mad.AttrName(mad.ClassSubnDirected, attr), mod, path)
}

// parallel runs f(i) for i in [0, n) on goroutines (the SMP window bounds
// what is outstanding) and waits for them.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
