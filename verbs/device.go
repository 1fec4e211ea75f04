// The device: its link, GID table, attributes, the QP and CQ tables, and the
// receive entry point that dispatches packets from the link to queue pairs.

package verbs

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// Device limits. They are what the device advertises in DeviceAttr and what
// the verbs calls enforce.
const (
	MaxQP         = 1 << 16
	MaxQPWR       = 1 << 14
	MaxSGE        = 32
	MaxCQ         = 1 << 14
	MaxCQE        = 1 << 20
	MaxMR         = 1 << 18
	MaxMRSize     = 1 << 40
	MaxPD         = 1 << 15
	MaxQPRdAtom   = 128
	MaxInline     = 256
	MaxSRQ        = 1 << 14
	MaxSRQWR      = 1 << 14
	MaxAH         = 1 << 16
	MaxMsgSize    = 1 << 31
	PageSizeCap   = 0xFFFFF000
	VendorID      = 0xFFFFFF // rxe's vendor ID
	VendorPartID  = 0
	HWVersion     = 0
	PhysPortCount = 1
	PKeyTableLen  = 1
)

// AtomicCap is the atomicity guarantee the device gives (ibv_atomic_cap).
type AtomicCap int

// Atomic capability levels.
const (
	AtomicNone AtomicCap = 0
	// AtomicHCA: atomic operations are atomic with respect to all other
	// atomic operations of this device, not to CPU accesses of the memory.
	AtomicHCA  AtomicCap = 1
	AtomicGlob AtomicCap = 2
)

// DeviceAttr is what QueryDevice reports (a subset of ibv_device_attr with
// the same meanings).
type DeviceAttr struct {
	FWVersion                      string
	NodeGUID, SysImageGUID         uint64
	MaxMRSize                      uint64
	PageSizeCap                    uint64
	VendorID, VendorPartID, HWVer  uint32
	MaxQP, MaxQPWR, MaxSGE         int
	MaxCQ, MaxCQE, MaxMR, MaxPD    int
	MaxQPRdAtom, MaxQPInitRdAtom   int
	MaxResRdAtom                   int
	MaxSRQ, MaxSRQWR, MaxSRQSGE    int
	MaxAH, MaxPKeys, PhysPortCount int
	MaxInlineData                  int
	MaxMsgSize                     uint64
	AtomicCap                      AtomicCap
	LocalCAAckDelay                uint8
	// MaxMW and DeviceCapFlags: memory windows (mw.go), as rxe
	// advertises them.
	MaxMW          int
	DeviceCapFlags DeviceCap
	// CompletionTimestampMask and HCACoreClock (kHz) describe the clock
	// of WC.Timestamp (ibv_device_attr_ex); see CreateCQEx.
	CompletionTimestampMask uint64
	HCACoreClock            uint64
	// DeviceCapFlagsEx is DeviceCapFlags with the extended capabilities
	// the device honours (FLUSH, ATOMIC_WRITE: flush.go), as
	// ibv_device_attr_ex's device_cap_flags_ex.
	DeviceCapFlagsEx DeviceCap

	// Multicast limits (MaxMcastGrp, MaxMcastQPAttach,
	// MaxTotalMcastQPAttach).
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAttach int
}

// PortState is a port's logical state (ibv_port_state).
type PortState int

// Port states.
const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return "PORT_NOP"
}

// PortAttr is what QueryPort reports.
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTableLen  int
	PKeyTableLen int
	MaxMsgSize   uint64
	LID, SMLID   uint16
	LinkLayer    string // LinkLayerEthernet or LinkLayerInfiniBand
	// LMC, SMSL, PhysState and MaxVLNum are an InfiniBand port's (zero
	// on RoCE): the LID mask count, the SM's service level, the
	// PortInfo physical state and the operational data VLs.
	LMC, SMSL, PhysState uint8
	MaxVLNum             int
	PortCapFlags         uint32
	ActiveSpeed          int
	ActiveWidth          int
	UDPPort              uint16
	PKeys                []wire.PKey
}

// unnamed counts the devices opened without a name, for their default
// names.
var unnamed atomic.Int64

// Options configure a device.
type Options struct {
	// Name is the device name (default "softrdmaN", N counting the devices
	// this process opened without a name, from 0).
	Name string
	// MTU is the port's maximum and active path MTU; 0 means MTU4096.
	MTU MTU
	// RemotePort is the UDP port peers listen on (default 4791). Tests that
	// run several devices on one address give each its own port.
	RemotePort uint16
	// Logger receives the device's logs (default slog.Default()).
	Logger *slog.Logger
	// NodeGUID is the device's node and system image GUID (QueryDevice).
	// If zero it is derived from the device's name and GIDs: the same on
	// every run, and different for devices of different names or
	// addresses. The roce package derives it from the interface's MAC
	// address, as Linux rxe does.
	NodeGUID uint64
	// NoPollReceive leaves receiving to the link's reader goroutine while
	// a program polls. By default a CQ.Poll that finds the CQ empty first
	// receives and handles what the link holds on the polling goroutine
	// (Device.Poll), without waiting, on a link that can (link.Poller: the
	// UDP link on Linux): a program polling in a loop then drives the
	// device itself, as with manual progress in other user-space stacks,
	// and needs neither the reader's wake-up nor a hand-off between
	// goroutines. It also keeps such a loop from starving the reader: with
	// one P (GOMAXPROCS=1, as in a container limited to one CPU) a
	// goroutine that polls and yields leaves Go's network poller unpolled
	// for up to 10 ms at a time. The reader still handles whatever arrives
	// while nobody polls. The cost is one non-blocking receive system call
	// per poll that finds the CQ empty.
	NoPollReceive bool
	// NoWaitReceive leaves receiving to the link's reader goroutine while
	// a goroutine waits in CQ.Wait. By default a waiter on a link that can
	// (link.Waiter: the UDP link on Linux) sleeps in the kernel on the
	// link's sockets itself and handles what arrives, so the completion it
	// waits for needs no hand-off between goroutines: on a machine with
	// few cores each costs tens of microseconds.
	NoWaitReceive bool
	// MaxInflight bounds the request packets the device's RC QPs have in
	// flight together (sent, not yet acknowledged): DefaultMaxInflight if
	// zero, no bound if negative. Each QP keeps its own window of 128
	// besides; the bound keeps many QPs streaming at once from
	// overflowing the receiver (a 4 MiB socket buffer holds 1,024
	// packets of 4 KiB). A QP holding none of it may always send.
	MaxInflight int
}

// DefaultMaxInflight is Options.MaxInflight's default.
const DefaultMaxInflight = 1024

// Device is an open software RDMA device bound to a link.
type Device struct {
	name  string
	link  link.Link
	log   *slog.Logger
	mtu   MTU
	rport uint16
	guid  uint64
	gids  []wire.GID

	mrs *mem.Table

	mu     sync.Mutex
	closed bool
	// holdsClosed says the device is closing: its QPs hold no more ACKs
	// for an answer (ackanswer.go). Guarded by answerHolds.mu.
	holdsClosed bool
	qps         map[wire.QPN]*QP
	nextQPN     uint32
	nPD         int
	nCQ         int
	nMR         int
	nMW         int // memory windows (mw.go)
	nQP         int

	qpTable qpTable // the receive path's view of qps

	events chan AsyncEvent
	stats  DeviceStats
	pacer  pacer   // generates READ answers a burst at a time (pace.go)
	acks   ackHold // ACKs held for the application's next move (ackdefer.go)

	budget   *txBudget   // Options.MaxInflight; nil: no bound
	poller   link.Poller // the link, if it can receive on a caller's goroutine
	waiter   link.Waiter // the link, if CQ.Wait receives on the waiter's goroutine
	pollRecv bool        // CQ.Poll receives when empty: a link.Poller, not Options.NoPollReceive
	// extSend says the link sends a payload from registered memory
	// (link.ExtSender): requests carry theirs as a view of it (send.go).
	extSend bool

	portDown atomic.Bool // the link reported itself down
	portMu   sync.Mutex  // orders state changes with their events

	cnt hwCounters // the device's events under rxe's names (Counters)

	ib *ibPort // the InfiniBand port, if the link is one (ibport.go)

	mcast mcastTable // multicast groups (mcast.go)
}

// DeviceStats counts what the device's receive path dropped, and some of
// what its send path did.
type DeviceStats struct {
	RxMalformed    atomic.Uint64 // failed wire.Parse
	RxUnknownQP    atomic.Uint64 // no such destination QP
	RxBadState     atomic.Uint64 // QP not able to receive
	RxBadTransport atomic.Uint64 // opcode's transport does not match the QP
	RxPKeyDrop     atomic.Uint64
	RxQKeyDrop     atomic.Uint64
	RxDuplicate    atomic.Uint64 // requests and responses with a PSN already seen
	RxOutOfSeq     atomic.Uint64
	// RxDuplicateDropped counts duplicate requests the responder dropped
	// without answering: a READ or atomic that repeats none it executed
	// (stale, forged, or older than the replay table), a READ whose
	// memory is gone, or a copy of a READ request whose queued answer has
	// not begun. The QP's state does not change.
	RxDuplicateDropped atomic.Uint64
	// RxRespQueueFull counts responder output dropped because the QP's
	// queue behind a READ answer was full (pace.go): only a requester
	// exceeding its PSN window fills it.
	RxRespQueueFull atomic.Uint64
	// TxDeferred counts posts to a streaming QP whose packets were left
	// for the device's pacer to send (see QP.PostSend).
	TxDeferred atomic.Uint64
	// TxFromMR counts request and READ response packets whose payload the
	// link sent from the registered memory itself rather than from a copy
	// in the packet (link.ExtSender: link/udp).
	TxFromMR atomic.Uint64
	// TxBudgetWaits counts the times a QP had packets to send and the
	// device's in-flight bound (Options.MaxInflight) had no room.
	TxBudgetWaits atomic.Uint64
	// TxRetryTimeouts counts the ACK timeouts of the device's RC
	// requesters: each sent the oldest unacknowledged packets again and
	// used one of its retry_cnt (rxe's completer_retry_err).
	TxRetryTimeouts atomic.Uint64
	// RxMcastNoGroup counts packets to a multicast group (destination QP
	// 0xFFFFFF) with no QP of the device attached.
	RxMcastNoGroup atomic.Uint64
	// PathMigrations counts the device's QPs that moved to their
	// alternate path (apm.go): a requester whose retries ran out, or a
	// responder following its peer. Migrations asked for by Modify are
	// not counted.
	PathMigrations atomic.Uint64
}

// AsyncEvent is an asynchronous event (ibv_async_event).
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port int
}

// Open creates a device on l and starts receiving. The device owns the link
// and closes it on Close.
func Open(l link.Link, opts *Options) (*Device, error) {
	if l == nil {
		return nil, errf(ErrInvalid, "nil link")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("softrdma%d", unnamed.Add(1)-1)
	}
	if o.MTU == 0 {
		o.MTU = MTU4096
	}
	if o.MTU.Bytes() == 0 {
		return nil, errf(ErrInvalid, "MTU code %d", o.MTU)
	}
	if o.RemotePort == 0 {
		o.RemotePort = link.DefaultPort
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	addrs := l.Addrs()
	if len(addrs) == 0 {
		return nil, errf(ErrInvalid, "link has no addresses")
	}
	d := &Device{
		name: o.Name, link: l, log: o.Logger.With("device", o.Name),
		mtu: o.MTU, rport: o.RemotePort, mrs: mem.NewTable(nil),
		qps: make(map[wire.QPN]*QP), nextQPN: 2,
		events: make(chan AsyncEvent, 256),
	}
	if p, ok := l.(link.Poller); ok {
		d.poller = p
		d.pollRecv = !o.NoPollReceive
	}
	if w, ok := l.(link.Waiter); ok && !o.NoWaitReceive {
		d.waiter = w
	}
	if e, ok := l.(link.ExtSender); ok && e.SendsExt() {
		d.extSend = true
	}
	switch {
	case o.MaxInflight == 0:
		d.budget = newTxBudget(d, DefaultMaxInflight)
	case o.MaxInflight > 0:
		d.budget = newTxBudget(d, o.MaxInflight)
	}
	for _, a := range addrs {
		d.gids = append(d.gids, wire.GIDFromAddr(a))
	}
	d.guid = o.NodeGUID
	if ibl, ok := l.(link.InfiniBand); ok {
		d.openIB(ibl)
		if d.guid == 0 {
			d.guid = d.ib.attr.Load().PortGUID
		}
	}
	if d.guid == 0 {
		d.guid = derivedGUID(o.Name, d.gids)
	}
	if sn, ok := l.(link.StateNotifier); ok {
		sn.NotifyState(d.linkState)
		d.linkState(sn.Up())
	}
	d.pacer.start()
	if err := l.Start(link.HandlerFunc(d.receive)); err != nil {
		d.pacer.stop()
		return nil, err
	}
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Link returns the device's link.
func (d *Device) Link() link.Link { return d.link }

// Close moves every QP to the error state (flushing its work requests),
// stops the link and waits for its goroutines.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errf(ErrClosed, "device %s", d.name)
	}
	d.closed = true
	d.mu.Unlock()
	sendHeldAcks()             // ackdefer.go
	answerHolds.closeDevice(d) // ackanswer.go
	d.mu.Lock()
	qps := make([]*QP, 0, len(d.qps))
	for _, qp := range d.qps {
		qps = append(qps, qp)
	}
	d.mu.Unlock()
	for _, qp := range qps {
		qp.shutdown()
	}
	if sn, ok := d.link.(link.StateNotifier); ok {
		sn.NotifyState(nil)
	}
	if d.ib != nil {
		d.ib.l.NotifyIBAttr(nil)
	}
	err := d.link.Close()
	d.pacer.stop()
	return err
}

// QueryDevice returns the device attributes.
func (d *Device) QueryDevice() DeviceAttr {
	return DeviceAttr{
		FWVersion: "softrdma 0.1", NodeGUID: d.guid, SysImageGUID: d.guid,
		MaxMRSize: MaxMRSize, PageSizeCap: PageSizeCap, VendorID: VendorID,
		VendorPartID: VendorPartID, HWVer: HWVersion, MaxQP: MaxQP, MaxQPWR: MaxQPWR,
		MaxSGE: MaxSGE, MaxCQ: MaxCQ, MaxCQE: MaxCQE, MaxMR: MaxMR, MaxPD: MaxPD,
		MaxQPRdAtom: MaxQPRdAtom, MaxQPInitRdAtom: MaxQPRdAtom, MaxResRdAtom: MaxQPRdAtom * MaxQP,
		MaxSRQ: MaxSRQ, MaxSRQWR: MaxSRQWR, MaxSRQSGE: MaxSGE, MaxAH: MaxAH,
		MaxPKeys: PKeyTableLen, PhysPortCount: PhysPortCount, MaxInlineData: MaxInline,
		MaxMsgSize: MaxMsgSize, AtomicCap: AtomicHCA, LocalCAAckDelay: 15,
		MaxMW: MaxMW, DeviceCapFlags: deviceCapFlags, DeviceCapFlagsEx: deviceCapFlags | deviceCaps,
		CompletionTimestampMask: CompletionTimestampMask, HCACoreClock: HCACoreClockKHz,
		MaxMcastGrp: MaxMcastGrp, MaxMcastQPAttach: MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxTotalMcastQPAttach,
	}
}

// QueryPort returns the attributes of port 1, the only port.
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, errf(ErrInvalid, "port %d (the device has port 1)", port)
	}
	state := PortActive
	if d.portDown.Load() {
		state = PortDown
	}
	pa := PortAttr{
		State: state, MaxMTU: d.mtu, ActiveMTU: d.mtu, GIDTableLen: len(d.gids),
		PKeyTableLen: PKeyTableLen, MaxMsgSize: MaxMsgSize, LID: 0, LinkLayer: LinkLayerEthernet,
		PortCapFlags: 0x00010000 | 0x04000000, // CM supported, IP-based GIDs
		ActiveSpeed:  1, ActiveWidth: 1, UDPPort: d.link.Port(),
		PKeys: []wire.PKey{wire.DefaultPKey},
	}
	if d.ib != nil {
		d.queryIBPort(&pa)
	}
	return pa, nil
}

// GIDs returns the GID table of port 1.
func (d *Device) GIDs() []wire.GID { return append([]wire.GID(nil), d.gids...) }

// QueryGID returns entry index of port 1's GID table.
func (d *Device) QueryGID(port, index int) (wire.GID, error) {
	if port != 1 || index < 0 || index >= len(d.gids) {
		return wire.GID{}, errf(ErrInvalid, "GID port %d index %d (table has %d entries)", port, index, len(d.gids))
	}
	return d.gids[index], nil
}

// GIDIndex returns the index of gid in the table, or -1.
func (d *Device) GIDIndex(g wire.GID) int {
	for i, x := range d.gids {
		if x == g {
			return i
		}
	}
	return -1
}

// Events returns the channel of asynchronous events. Events are dropped
// (and logged) if nobody reads and the channel's buffer of 256 is full.
func (d *Device) Events() <-chan AsyncEvent { return d.events }

// GetAsyncEvent waits for the next asynchronous event.
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select {
	case ev := <-d.events:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	}
}

func (d *Device) postEvent(ev AsyncEvent) {
	select {
	case d.events <- ev:
	default:
		d.log.Warn("async event dropped: queue full", "event", ev.Type.String())
	}
}

// linkState follows the link's state (link.StateNotifier): port 1 goes
// DOWN or ACTIVE, with an EventPortErr or EventPortActive event, as rxe
// does when its net device loses or regains carrier. QPs are left as they
// are (rxe does not move them to the error state either): while the port is
// down their packets are lost, so RC requesters retry and, if it stays down
// longer than their retry budget, complete with RETRY_EXC_ERR.
func (d *Device) linkState(up bool) {
	d.portMu.Lock()
	defer d.portMu.Unlock()
	if d.portDown.Swap(!up) == !up {
		return
	}
	ev := AsyncEvent{Type: EventPortActive, Port: 1}
	if !up {
		ev.Type = EventPortErr
		d.cnt[cntLinkDowned].Add(1)
	}
	d.log.Info("port state changed", "state", map[bool]string{true: "ACTIVE", false: "DOWN"}[up])
	d.postEvent(ev)
}

// Poll receives and handles, on the calling goroutine, the packets the link
// holds now, without waiting, and returns how many it handled. A program
// that busy-polls memory an RDMA WRITE fills, rather than a CQ, calls it in
// its loop; CQ.Poll calls it by itself (see Options.NoPollReceive). It returns 0
// at once if the link cannot be polled (see link.Poller) or its reader is
// receiving at that moment. Poll must not be called from a completion
// channel's or an event's handler running inside the device.
func (d *Device) Poll() int {
	flushAcks()
	answerHolds.poll()
	return d.pollHolding()
}

// Stats returns the device's receive drop counters.
func (d *Device) Stats() *DeviceStats { return &d.stats }

// lookupQP returns the QP for a destination QPN on the data path.
func (d *Device) lookupQP(n wire.QPN) *QP { return d.qpTable.get(n) }

// derivedGUID is a GUID for a device without one: an FNV-1a hash of its
// name and GIDs, in the form of a locally administered unicast EUI-64.
func derivedGUID(name string, gids []wire.GID) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	for _, g := range gids {
		h.Write(g[:])
	}
	return h.Sum64()&^(0x01<<56) | 0x02<<56
}
