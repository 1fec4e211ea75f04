// The Manager: the GSI QP, its buffers and receive loop, the MAD send path,
// the listener and connection tables.

package cm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrInvalid: an argument is out of range.
	ErrInvalid = errors.New("cm: invalid argument")
	// ErrState: the Conn is not in a state that allows the call.
	ErrState = errors.New("cm: invalid state")
	// ErrInUse: the service ID already has a listener.
	ErrInUse = errors.New("cm: service ID in use")
	// ErrClosed: the Manager, Listener or Conn is closed.
	ErrClosed = errors.New("cm: closed")
	// ErrTimeout: the peer did not answer after all retries.
	ErrTimeout = errors.New("cm: timed out")
)

func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// Defaults of rdma_cm (CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES).
const (
	DefaultResponseTimeout = 20 // 4.096 µs * 2^20, about 4.3 s
	DefaultMaxRetries      = 15
)

// DefaultRecvDepth is Options.RecvDepth's default: MAD receive buffers
// enough (296 KiB) for a burst of disconnects from a peer closing thousands
// of connections at once to lose about half of it rather than nine tenths
// (Linux's MAD layer posts 512).
const DefaultRecvDepth = 1024

// Options configure a Manager.
type Options struct {
	// Logger receives the Manager's logs (default slog.Default()).
	Logger *slog.Logger
	// ResponseTimeout is the CM response timeout exponent the Manager
	// announces and waits with: 4.096 µs * 2^ResponseTimeout (default 20).
	ResponseTimeout uint8
	// MaxRetries is how often a request is retransmitted before giving up
	// (default 15, at most 15).
	MaxRetries uint8
	// TimeWait overrides the time-wait period (default: the local ACK
	// timeout of the connection, 4.096 µs * 2^timeout).
	TimeWait time.Duration
	// RecvDepth is the number of MAD receive buffers (default
	// DefaultRecvDepth). A MAD that finds none posted is dropped, as on
	// any UD QP, and its sender's retransmission, a response timeout
	// later, is what recovers it.
	RecvDepth int
	// GMP, if not nil, receives every MAD of another management class
	// than the CM's that arrives on the GSI QP and is not the answer to
	// one of the Manager's own SA queries (for example SA requests, when
	// the device's port is the SM's and a subnet administrator serves
	// there), with the path back to its sender's GSI QP; answer with
	// SendGMP. It runs on the Manager's receive goroutine and must not
	// block; msg is a copy it may keep. Nil: such MADs are dropped.
	GMP func(from Path, msg mad.MAD)
}

// Stats count what the Manager saw.
type Stats struct {
	Received, Sent, Retransmits, Duplicates, Dropped, Malformed atomic.Uint64
}

const bufSize = 40 + mad.Size // GRH area + MAD

// Manager runs the CM on one device.
type Manager struct {
	dev  *verbs.Device
	log  *slog.Logger
	opts Options
	guid uint64

	pd     *verbs.PD
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	ch     *verbs.CompChannel
	qp     *verbs.QP
	mr     *verbs.MR
	buf    []byte // RecvDepth receive buffers, then one send buffer

	sendMu sync.Mutex
	ahs    map[ahKey]*verbs.AH
	ib     bool // the port is an InfiniBand port: paths by LID

	mu        sync.Mutex
	closed    bool
	listeners map[uint64]*Listener
	conns     map[uint32]*Conn   // by local comm ID (also SIDR request ID)
	remote    map[remKey]*Conn   // passive exchanges by peer GID and its comm/request ID
	sa        map[uint64]*saWait // SA queries in flight, by TID (saclient.go)
	tidHi     uint32
	tidLo     uint32

	stats  Stats
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup // timer callbacks in flight
}

type ahKey struct {
	sgid   int
	dgid   wire.GID
	dlid   uint16 // InfiniBand: the path's DLID, SL, path bits and GRH
	sl     uint8
	bits   uint16
	global bool
}

type remKey struct {
	gid  wire.GID
	lid  uint16 // InfiniBand: the peer's LID (its GID may be unknown)
	id   uint32
	sidr bool
}

// New starts a CM on dev: it creates the GSI QP, moves it to RTS and starts
// receiving. Close stops it; the device stays open.
func New(dev *verbs.Device, opts *Options) (*Manager, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ResponseTimeout == 0 {
		o.ResponseTimeout = DefaultResponseTimeout
	}
	if o.ResponseTimeout > 31 {
		return nil, errf(ErrInvalid, "response timeout exponent %d (0..31)", o.ResponseTimeout)
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.MaxRetries > 15 {
		return nil, errf(ErrInvalid, "max retries %d (0..15)", o.MaxRetries)
	}
	if o.RecvDepth == 0 {
		o.RecvDepth = DefaultRecvDepth
	}
	m := &Manager{dev: dev, log: o.Logger.With("cm", dev.Name()), opts: o,
		guid: dev.QueryDevice().NodeGUID, ahs: map[ahKey]*verbs.AH{},
		listeners: map[uint64]*Listener{}, conns: map[uint32]*Conn{}, remote: map[remKey]*Conn{},
		sa:   map[uint64]*saWait{},
		done: make(chan struct{})}
	if pa, err := dev.QueryPort(1); err == nil && pa.LinkLayer == verbs.LinkLayerInfiniBand {
		m.ib = true
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	m.tidHi = binary.BigEndian.Uint32(rnd[:])
	m.tidLo = binary.BigEndian.Uint32(rnd[4:])
	if err := m.setup(); err != nil {
		m.teardown()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.recvLoop(ctx)
	return m, nil
}

func (m *Manager) setup() error {
	var err error
	d := m.dev
	if m.pd, err = d.AllocPD(); err != nil {
		return err
	}
	m.ch = d.CreateCompChannel()
	if m.recvCQ, err = d.CreateCQ(m.opts.RecvDepth, m.ch); err != nil {
		return err
	}
	if m.sendCQ, err = d.CreateCQ(256, nil); err != nil {
		return err
	}
	m.qp, err = m.pd.CreateGSIQP(verbs.QPInitAttr{SendCQ: m.sendCQ, RecvCQ: m.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: m.opts.RecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: mad.Size}})
	if err != nil {
		return err
	}
	m.buf = make([]byte, (m.opts.RecvDepth+1)*bufSize)
	if m.mr, err = m.pd.RegMR(m.buf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if err = m.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, PKeyIndex: 0, PortNum: 1, QKey: verbs.GSIQKey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey); err != nil {
		return err
	}
	if err = m.qp.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState); err != nil {
		return err
	}
	if err = m.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: 0}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return err
	}
	for i := 0; i < m.opts.RecvDepth; i++ {
		if err = m.postRecv(i); err != nil {
			return err
		}
	}
	return m.recvCQ.ReqNotify(false)
}

func (m *Manager) postRecv(i int) error {
	return m.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{m.mr.SGE(i*bufSize, bufSize)}}})
}

func (m *Manager) teardown() {
	for _, ah := range m.ahs {
		ah.Destroy()
	}
	if m.qp != nil {
		m.qp.Destroy()
	}
	if m.mr != nil {
		m.mr.Dereg()
	}
	if m.sendCQ != nil {
		m.sendCQ.Destroy()
	}
	if m.recvCQ != nil {
		m.recvCQ.Destroy()
	}
	if m.pd != nil {
		m.pd.Dealloc()
	}
}

// Device returns the Manager's device.
func (m *Manager) Device() *verbs.Device { return m.dev }

// Stats returns the Manager's counters.
func (m *Manager) Stats() *Stats { return &m.stats }

// Close stops the Manager: pending exchanges are abandoned without events,
// the receive loop ends and the GSI QP and its resources are freed.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errf(ErrClosed, "manager")
	}
	m.closed = true
	for _, c := range m.conns {
		c.stopTimerLocked()
		c.state = stateClosed
	}
	for _, c := range m.remote {
		c.stopTimerLocked()
		c.state = stateClosed
	}
	m.conns, m.remote, m.listeners = map[uint32]*Conn{}, map[remKey]*Conn{}, map[uint64]*Listener{}
	m.mu.Unlock()
	m.cancel()
	<-m.done
	m.wg.Wait()
	m.sendMu.Lock()
	m.teardown()
	m.ahs = nil
	m.sendMu.Unlock()
	return nil
}

// nextTID returns a new transaction ID.
func (m *Manager) nextTIDLocked() uint64 {
	m.tidLo++
	return uint64(m.tidHi)<<32 | uint64(m.tidLo)
}

// newLocalIDLocked returns an unused random local communication ID.
func (m *Manager) newLocalIDLocked() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		id := binary.BigEndian.Uint32(b[:])
		if _, used := m.conns[id]; id != 0 && !used {
			return id
		}
	}
}

// send transmits one MAD to the GSI QP of dst.
func (m *Manager) send(dst Path, b []byte) {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	if m.ahs == nil {
		return
	}
	k := ahKey{sgid: dst.SGIDIndex, dgid: dst.DGID}
	if dst.IsIB() {
		k = ahKey{sgid: dst.SGIDIndex, dgid: dst.DGID, dlid: dst.DLID, sl: dst.SL, bits: dst.SLID, global: dst.Global}
	}
	ah := m.ahs[k]
	if ah == nil {
		if len(m.ahs) >= 1024 {
			for k, a := range m.ahs {
				a.Destroy()
				delete(m.ahs, k)
			}
		}
		var err error
		attr := verbs.AHAttr{DGID: dst.DGID, SGIDIndex: dst.SGIDIndex, HopLimit: 64, PortNum: 1}
		if dst.IsIB() {
			// CM MADs travel by LID on the connection's path.
			attr = dst.AHAttr(m.lmc())
			attr.StaticRate = 0
		}
		ah, err = m.pd.CreateAH(attr)
		if err != nil {
			m.log.Debug("cm: no address handle", "dst", dst.DGID, "err", err)
			m.stats.Dropped.Add(1)
			return
		}
		m.ahs[k] = ah
	}
	off := m.opts.RecvDepth * bufSize
	copy(m.buf[off:off+mad.Size], b)
	wr := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled,
		SGL: []verbs.SGE{m.mr.SGE(off, mad.Size)}, AH: ah, RemoteQPN: verbs.GSIQPN, RemoteQKey: verbs.GSIQKey}}
	var wcs [32]verbs.WC
	for try := 0; ; try++ {
		for m.sendCQ.Poll(wcs[:]) > 0 {
		}
		err := m.qp.PostSend(wr)
		if err == nil {
			m.stats.Sent.Add(1)
			return
		}
		if !errors.Is(err, verbs.ErrQueueFull) || try > 100 {
			m.log.Debug("cm: send failed", "err", err)
			m.stats.Dropped.Add(1)
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// recvLoop takes MADs off the GSI QP until the Manager closes.
func (m *Manager) recvLoop(ctx context.Context) {
	defer close(m.done)
	wcs := make([]verbs.WC, 64)
	for {
		for {
			n := m.recvCQ.Poll(wcs)
			if n == 0 {
				break
			}
			for i := range wcs[:n] {
				m.handleWC(&wcs[i])
			}
		}
		if err := m.recvCQ.ReqNotify(false); err != nil {
			return
		}
		if n := m.recvCQ.Poll(wcs); n > 0 {
			for i := range wcs[:n] {
				m.handleWC(&wcs[i])
			}
			continue
		}
		if _, err := m.ch.Get(ctx); err != nil {
			return
		}
	}
}

func (m *Manager) handleWC(wc *verbs.WC) {
	i := int(wc.WRID)
	defer func() {
		if err := m.postRecv(i); err != nil {
			m.log.Debug("cm: repost receive", "err", err)
		}
	}()
	if wc.Status != verbs.Success {
		if wc.Status == verbs.LocLenErr { // longer than a MAD
			m.stats.Malformed.Add(1)
		}
		return
	}
	b := m.buf[i*bufSize : (i+1)*bufSize]
	n := int(wc.ByteLen)
	if n < 40 || n > len(b) {
		m.stats.Malformed.Add(1)
		return
	}
	msg, err := mad.Parse(b[40:n])
	if err == nil && msg.MgmtClass() != mad.ClassCM {
		cp := mad.MAD(append([]byte(nil), msg...))
		if msg.MgmtClass() == mad.ClassSubnAdm && msg.Method().IsResponse() && m.onSA(cp) { // saclient.go
			m.stats.Received.Add(1)
			return
		}
		if h := m.opts.GMP; h != nil {
			m.stats.Received.Add(1)
			h(m.fromPath(wc, b[:40]), cp)
			return
		}
		m.stats.Malformed.Add(1) // not the CM's, and nobody else's
		return
	}
	if err != nil || msg.MgmtClass() != mad.ClassCM || msg.Method() != mad.MethodSend {
		m.stats.Malformed.Add(1)
		return
	}
	m.stats.Received.Add(1)
	from := m.fromPath(wc, b[:40])
	// The buffer is reposted on return: handlers get copies.
	var cp [mad.Size]byte
	copy(cp[:], msg)
	m.dispatch(from, mad.MAD(cp[:]))
}

// fromPath is the path back to the sender of a received MAD: on RoCE its
// GIDs from the GRH area g; on InfiniBand its LID and SL from the
// completion, and the GIDs and a GRH only if the MAD came with one.
func (m *Manager) fromPath(wc *verbs.WC, g []byte) Path {
	if m.ib && wc.Flags&verbs.WCGRH == 0 {
		return Path{DLID: wc.SLID, SL: wc.SL, SLID: m.portLID() | uint16(wc.DLIDPath)}
	}
	src, dst := grhAddrs(g)
	sgid := m.dev.GIDIndex(wire.GIDFromAddr(dst))
	if sgid < 0 {
		sgid = 0
	}
	p := Path{SGIDIndex: sgid, DGID: wire.GIDFromAddr(src), HopLimit: 64}
	if m.ib {
		p.DLID, p.SL, p.SLID, p.Global = wc.SLID, wc.SL, m.portLID()|uint16(wc.DLIDPath), true
	}
	return p
}

// portLID is the LID of the Manager's InfiniBand port.
func (m *Manager) portLID() uint16 {
	pa, err := m.dev.QueryPort(1)
	if err != nil {
		return 0
	}
	return pa.LID
}

// lmc is the LMC of the Manager's InfiniBand port.
func (m *Manager) lmc() uint8 {
	pa, err := m.dev.QueryPort(1)
	if err != nil {
		return 0
	}
	return pa.LMC
}

// grhAddrs returns the source and destination addresses of a UD receive's
// GRH area (an IPv6 header, or an IPv4 header at offset 20).
func grhAddrs(g []byte) (src, dst netip.Addr) {
	if g[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(g[8:24])).Unmap(), netip.AddrFrom16([16]byte(g[24:40])).Unmap()
	}
	return netip.AddrFrom4([4]byte(g[32:36])), netip.AddrFrom4([4]byte(g[36:40]))
}

// Listener receives the REQs and SIDR_REQs of one service ID.
type Listener struct {
	m         *Manager
	serviceID uint64
	handler   Handler
	// Context is free for the application's use.
	Context any
}

// Listen registers h for REQs and SIDR_REQs carrying serviceID. For each
// new request h gets a new passive Conn with EventREQ or EventSIDRReq.
func (m *Manager) Listen(serviceID uint64, h Handler) (*Listener, error) {
	if h == nil {
		return nil, errf(ErrInvalid, "nil handler")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errf(ErrClosed, "manager")
	}
	if _, ok := m.listeners[serviceID]; ok {
		return nil, errf(ErrInUse, "service ID %#x", serviceID)
	}
	l := &Listener{m: m, serviceID: serviceID, handler: h}
	m.listeners[serviceID] = l
	return l, nil
}

// ServiceID returns the service ID the listener serves.
func (l *Listener) ServiceID() uint64 { return l.serviceID }

// Close stops listening; connections already handed out are not affected.
func (l *Listener) Close() error {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listeners[l.serviceID] != l {
		return errf(ErrClosed, "listener")
	}
	delete(m.listeners, l.serviceID)
	return nil
}

// timeoutOf converts an IBTA timeout exponent to a duration: 4.096 µs * 2^e.
func timeoutOf(e uint8) time.Duration {
	return time.Duration(4096<<min(e, 31)) * time.Nanosecond
}

// NumConns returns how many exchanges the Manager tracks: pending,
// established and in time wait.
func (m *Manager) NumConns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}
