// Setting up and tearing down a UDP link: configuration, one kernel UDP
// socket bound per local address (all on one port), the reader goroutines'
// lifecycle and the counters. The packets themselves flow through io.go.

// Package udp carries RoCEv2 over kernel UDP sockets, IPv4 and IPv6.
//
// Open binds one UDP socket per local address, all on the same port
// (Config.Port: link.DefaultPort, 4791, to reach other RoCEv2 devices, or an
// ephemeral one). Send groups a batch by source address and hands each group to
// its socket with one sendmmsg call (x/net's WriteBatch); each socket has a
// reader goroutine that receives up to Config.BatchSize datagrams per
// recvmmsg call into pool packets and hands them to the Handler as one batch.
// On Linux it calls recvmmsg itself through the socket's syscall.RawConn
// (parking in the runtime's poller when the socket is empty, after looking
// again for up to Config.RxSpin if it has just received), with headers
// and address buffers set up once, so receiving allocates nothing per
// datagram. On other platforms the same code works through x/net's
// ReadBatch on a plain net.UDPConn, one datagram per call, without the socket
// options below.
//
// # Sending and the ICRC
//
// On Linux, IPv4 sockets have IP_MTU_DISCOVER set to IP_PMTUDISC_DO, so
// the kernel sends their datagrams with Don't Fragment, and an unconnected
// socket's with IP Identification 0: the ICRC is sealed for exactly that
// header (wire.Framing with IPv4ID 0, IPv4Frag wire.IPv4DontFragment, the
// socket's port as SrcPort), which is what Linux rxe and any other receiver
// compute. The link's own sockets stay unconnected; each source-port
// socket is connected to the destination of its first send, saving the
// kernel a route lookup per datagram, and an IPv4 one's packets are sealed
// for the Identifications its counter gives them, which the link reads
// back (connect.go; Config.DisableConnect turns it off). IPv6 packets are sealed
// for their real framing (IPv6 sockets use IPV6_PMTUDISC_DO too, so they are
// never fragmented locally).
//
// # Receiving and the ICRC policy
//
// IPv6 packets are always verified: a mismatch is dropped and counted in
// Stats.RxBadICRC, whatever the policy. IPv6 sockets set UDP_NO_CHECK6_RX,
// so datagrams with a zero UDP checksum, which Linux rxe sends, are accepted.
//
// For IPv4 a UDP socket cannot see the sender's IP Identification and Don't
// Fragment flag, which the ICRC covers, so Config.ICRCPolicy decides:
//
//   - VerifyIPv4 (the default) verifies the ICRC assuming Identification 0
//     and Don't Fragment (what an unconnected socket with IP_PMTUDISC_DO
//     sends); a packet that does not match is accepted if some
//     Identification and flag make its ICRC right (the one after its flow's
//     last is tried first, wire.ICRCCache; wire.VerifyICRCAnyIPv4ID:
//     a corrupted packet passes with probability about 2^-15) and counted in
//     Stats.RxICRCAnyID, else dropped and counted in Stats.RxBadICRC, as
//     Linux rxe drops it. Linux rxe's Identifications vary from packet to
//     packet, a GSO send numbers its segments 0, 1, 2, ..., and a connected
//     socket's datagrams count up from its counter, so all verify this way.
//   - VerifyIPv4Zero verifies assuming Identification 0 and accepts a
//     packet that does not match, counting it in Stats.RxICRCUnchecked.
//   - StrictIPv4 accepts only packets that verify with Identification 0:
//     it drops rxe's packets, the later segments of GSO sends and connected
//     sockets' packets (set Config.DisableGSO and Config.DisableConnect on
//     the peers).
//   - NoICRCCheck accepts every IPv4 packet without computing its ICRC and
//     counts it in Stats.RxICRCUnchecked.
//
// Datagrams shorter than a BTH and ICRC, or too large for a packet buffer
// (link.BufSize bytes or more), are dropped and counted in Stats.RxMalformed.
// Received packets have unmapped addresses: Src is the sender's address and
// port, Dst the receiving socket's.
package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/link"
)

// ICRCPolicy says how a link checks the ICRC of received IPv4 packets (see
// the package documentation). IPv6 packets are always checked.
type ICRCPolicy int

// ICRC policies.
const (
	// VerifyIPv4 verifies with IP Identification 0 and Don't Fragment,
	// else with any of them, and drops packets that verify with none.
	VerifyIPv4 ICRCPolicy = iota
	// VerifyIPv4Zero verifies assuming IP Identification 0 and Don't
	// Fragment and accepts mismatches as unchecked.
	VerifyIPv4Zero
	// StrictIPv4 verifies assuming IP Identification 0 and Don't Fragment
	// and drops mismatches.
	StrictIPv4
	// NoICRCCheck accepts IPv4 packets without checking.
	NoICRCCheck
)

// String returns the policy's name.
func (p ICRCPolicy) String() string {
	switch p {
	case VerifyIPv4:
		return "VerifyIPv4"
	case VerifyIPv4Zero:
		return "VerifyIPv4Zero"
	case StrictIPv4:
		return "StrictIPv4"
	case NoICRCCheck:
		return "NoICRCCheck"
	}
	return fmt.Sprintf("ICRCPolicy(%d)", int(p))
}

// Defaults for Config fields left zero.
const (
	DefaultBatchSize    = 32
	DefaultSocketBuffer = 4 << 20
)

// bindTries is how often Open tries to find an ephemeral port free on all
// addresses when Config.Port is 0.
const bindTries = 8

// Config configures a link.
type Config struct {
	// Addrs are the local addresses, IPv4 (plain or IPv4-mapped) or IPv6,
	// in GID order. Each gets its own socket bound to Addr:Port. They must
	// be unicast and specific (not 0.0.0.0 or ::): the ICRC covers the
	// destination address, so the link must know which one a packet came in
	// on. Required.
	Addrs []netip.Addr
	// Port is the UDP port bound on every address. Set it to
	// link.DefaultPort (4791), the RoCEv2 port, to talk to other devices;
	// 0 picks a free ephemeral port usable on all addresses (for tests and
	// for several links on one host).
	Port uint16
	// ICRCPolicy is the IPv4 receive policy (VerifyIPv4 if zero).
	ICRCPolicy ICRCPolicy
	// Logger receives debug and warning messages (discarded if nil).
	Logger *slog.Logger
	// BatchSize is the number of datagrams a reader receives per call and
	// so the largest batch handed to the Handler (DefaultBatchSize if zero).
	BatchSize int
	// Interface, if set, names the network interface the addresses belong
	// to: the link then follows its state (Up, NotifyState), down while
	// the interface is not up and running, through a netlink subscription
	// (RTNLGRP_LINK). Linux only: elsewhere Open fails if it is set.
	Interface string
	// SocketBuffer is the size in bytes asked for SO_RCVBUF and SO_SNDBUF
	// (DefaultSocketBuffer if zero, the system's default if negative). Best
	// effort: on Linux the link tries SO_RCVBUFFORCE first (which needs
	// CAP_NET_ADMIN), then SO_RCVBUF, which the kernel caps at
	// net.core.rmem_max.
	SocketBuffer int
	// FixedSourcePort sends every packet from Port. By default a packet
	// whose Src asks for a source port in the RoCEv2 range (0xC000-0xFFFF;
	// verbs asks for one per queue pair, as Linux does) leaves from it, by
	// a send-only socket bound to that port (srcport.go).
	FixedSourcePort bool
	// MaxSourcePorts bounds the source-port sockets
	// (DefaultMaxSourcePorts if zero); packets asking for more ports leave
	// from Port and are counted in Stats.TxSourcePortFallback.
	MaxSourcePorts int
	// DisableGSO sends every packet as its own datagram. By default runs
	// of packets to one destination leave as one UDP_SEGMENT send where
	// the kernel supports it (Linux 4.18 and later), falling back by
	// itself if the path refuses it.
	DisableGSO bool
	// DisableGRO receives datagram by datagram. By default the link asks
	// the kernel to coalesce received datagrams of one flow (UDP_GRO,
	// Linux 5.0 and later: a GSO send on loopback arrives whole) and
	// splits them again, checking each packet on its own; it costs 512 KiB
	// of buffers per receiving socket.
	DisableGRO bool
	// DisableConnect keeps source-port sockets unconnected. By default
	// (Linux) each is connected to the destination of its first send,
	// which spares the kernel a route lookup per datagram (connect.go).
	DisableConnect bool
	// RxSpin is how long a reader goroutine (Linux) goes on looking for
	// datagrams after a batch before it parks in the runtime's network
	// poller, so that a stream is received without a wake-up per batch:
	// DefaultRxSpin if zero (or the SOFTRDMA_RXSPIN environment variable,
	// a duration, if set), no spin if negative. The spin follows traffic
	// only and yields to the process's other goroutines between looks.
	RxSpin time.Duration
}

// socket is one bound UDP socket.
type socket struct {
	addr  netip.Addr     // unmapped local address, with its zone
	key   netip.Addr     // addr without zone, for matching packet sources
	local netip.AddrPort // addr and the link's port: Dst of received packets
	is4   bool
	// ifindex is the interface holding addr (0 if unknown): where the
	// socket sends multicast packets and a group of its family is joined.
	ifindex int
	gone    atomic.Bool // closed by LeaveGroup: its reader ends quietly
	conn    sockConn    // a *net.UDPConn, or a source socket's file (listenSourceUDP)
	bc      batchConn
	gso     atomic.Bool // UDP_SEGMENT available and not refused
	// With UDP_GRO on (receives may hold several packets): where the
	// reader's messages continue past their packets' buffers.
	groBuf []byte
	rx     atomic.Pointer[rxState] // set by Start
	// cs is a source-port socket's connection (connect.go); nil for the
	// link's own sockets and with Config.DisableConnect.
	cs *connState
}

// sockConn is what the link keeps of a socket: the link's own sockets are
// *net.UDPConn, read through the runtime's network poller; a source-port
// socket on Linux is an *os.File the poller does not know (listenSourceUDP).
type sockConn interface {
	syscall.Conn
	Close() error
}

// Link is a RoCEv2 link over kernel UDP sockets. It implements link.Link;
// its methods are safe for concurrent use.
type Link struct {
	addrs  []netip.Addr // as configured
	port   uint16
	policy ICRCPolicy
	batch  int
	rxSpin time.Duration // Config.RxSpin resolved; 0: no spin
	log    *slog.Logger
	socks  []*socket
	ctr    link.Counters
	// Spins that ended with a datagram and that found none (for tests).
	spinHits, spinMisses atomic.Uint64

	// Source-port sockets (srcport.go), per address index; opened under
	// mu, read without it.
	fixedPort bool
	noGSO     bool
	noConnect bool
	maxSports int
	sockBuf   int
	sports    []atomic.Pointer[sourcePorts]
	nSports   int       // guarded by mu
	extra     []*socket // the source-port sockets, to close; guarded by mu
	ns        *netns    // the namespace of socks, where extra sockets go

	closed  atomic.Bool                  // Send fails once set
	scratch sync.Pool                    // *sendScratch
	hook    atomic.Pointer[func([]byte)] // SetSealHook's function

	wait waitState // PollWait's (wait_linux.go)

	state link.State // see Up
	watch *ifWatch   // Config.Interface's state, or nil

	mu      sync.Mutex // guards started, closing, handler, groups and wg.Add
	started bool
	handler link.Handler
	groups  map[netip.Addr]*socket // joined multicast groups (mcast.go)
	closing bool
	wg      sync.WaitGroup
}

// Open binds the sockets of a new link. The error wraps link.ErrAddress if
// an address is unusable or cannot be bound (naming the address).
func Open(cfg Config) (*Link, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("udp: open: %w: no addresses", link.ErrAddress)
	}
	keys := make([]netip.Addr, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		u := a.Unmap()
		switch {
		case !a.IsValid():
			return nil, fmt.Errorf("udp: open: %w: invalid address at index %d", link.ErrAddress, i)
		case u.IsUnspecified() || u.IsMulticast():
			return nil, fmt.Errorf("udp: open: %w: %s is not a specific unicast address", link.ErrAddress, a)
		}
		keys[i] = u.WithZone("")
		for _, k := range keys[:i] {
			if k == keys[i] {
				return nil, fmt.Errorf("udp: open: %w: %s listed twice", link.ErrAddress, a)
			}
		}
	}
	switch cfg.ICRCPolicy {
	case VerifyIPv4, VerifyIPv4Zero, StrictIPv4, NoICRCCheck:
	default:
		return nil, fmt.Errorf("udp: open: unknown %v", cfg.ICRCPolicy)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.SocketBuffer == 0 {
		cfg.SocketBuffer = DefaultSocketBuffer
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	var socks []*socket
	var port uint16
	var err error
	for try := range bindTries {
		socks, port, err = bindAll(cfg.Addrs, cfg.Port, cfg.SocketBuffer, log)
		if err == nil || cfg.Port != 0 || !errors.Is(err, errRetry) {
			break
		}
		log.Debug("udp: ephemeral port taken on another address, retrying", "try", try, "err", err)
	}
	if err != nil {
		return nil, err
	}
	if cfg.MaxSourcePorts <= 0 {
		cfg.MaxSourcePorts = DefaultMaxSourcePorts
	}
	l := &Link{
		addrs:     append([]netip.Addr(nil), cfg.Addrs...),
		port:      port,
		policy:    cfg.ICRCPolicy,
		batch:     cfg.BatchSize,
		rxSpin:    rxSpin(cfg.RxSpin),
		log:       log,
		socks:     socks,
		fixedPort: cfg.FixedSourcePort,
		maxSports: cfg.MaxSourcePorts,
		sockBuf:   cfg.SocketBuffer,
		noGSO:     cfg.DisableGSO,
		noConnect: cfg.DisableConnect,
		sports:    make([]atomic.Pointer[sourcePorts], len(socks)),
		ns:        currentNetns(),
	}
	for _, sk := range socks {
		sk.gso.Store(!cfg.DisableGSO && probeGSO(sk.conn))
		// Before any packet can arrive, so none is left uncoalesced.
		if !cfg.DisableGRO && enableGRO(sk.conn) {
			sk.groBuf = groOverflow()
		}
	}
	if cfg.Interface != "" {
		w, up, err := watchInterface(cfg.Interface)
		if err != nil {
			for _, s := range socks {
				s.conn.Close()
			}
			return nil, err
		}
		l.watch = w
		l.state.Set(up)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			w.run(func(up bool) { l.setUp(up, "interface "+cfg.Interface, nil) })
		}()
	}
	l.initWait()
	log.Debug("udp: link open", "addrs", cfg.Addrs, "port", port, "icrc", cfg.ICRCPolicy, "batch", cfg.BatchSize)
	return l, nil
}

// errRetry marks a bind failure worth retrying with another ephemeral port.
var errRetry = errors.New("retry")

// bindAll binds a socket on every address at port; port 0 binds the first
// on an ephemeral port and the others on the same one.
func bindAll(addrs []netip.Addr, port uint16, buf int, log *slog.Logger) ([]*socket, uint16, error) {
	socks := make([]*socket, 0, len(addrs))
	for i, a := range addrs {
		s, err := listen(netip.AddrPortFrom(a.Unmap(), port), buf, log)
		if err != nil {
			for _, s := range socks {
				s.conn.Close()
			}
			if i > 0 {
				err = fmt.Errorf("%w: %w", errRetry, err)
			}
			return nil, 0, err
		}
		if port == 0 {
			port = s.local.Port()
		}
		socks = append(socks, s)
	}
	return socks, port, nil
}

// listen binds one socket at ap (whose address is unmapped).
func listen(ap netip.AddrPort, buf int, log *slog.Logger) (*socket, error) {
	is4 := ap.Addr().Is4()
	network := "udp6"
	if is4 {
		network = "udp4"
	}
	conn, err := listenUDP(network, ap, is4, buf, log)
	if err != nil {
		return nil, fmt.Errorf("udp: bind %s: %w: %w", ap, link.ErrAddress, err)
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	s := &socket{
		addr:    ap.Addr(),
		key:     ap.Addr().WithZone(""),
		local:   netip.AddrPortFrom(ap.Addr(), local.Port()),
		is4:     is4,
		conn:    conn,
		bc:      newBatchConn(conn, is4),
		ifindex: interfaceIndex(ap.Addr()),
	}
	multicastSend(conn, s.addr, s.ifindex, log)
	return s, nil
}

// Addrs returns the configured addresses.
func (l *Link) Addrs() []netip.Addr { return append([]netip.Addr(nil), l.addrs...) }

// Port returns the UDP port bound on every address.
func (l *Link) Port() uint16 { return l.port }

// Up reports whether the link can carry packets (link.StateNotifier). With
// Config.Interface it follows the interface's state. It also goes down when the kernel says the network or the local address is gone
// (a send fails with ENETDOWN or EADDRNOTAVAIL) or a socket is closed other
// than by Close, and (without Config.Interface) up again when a packet is
// sent or received. Per-destination errors
// (unreachable hosts or networks) do not count.
func (l *Link) Up() bool { return l.state.Up() }

// NotifyState registers f to be called with each new state
// (link.StateNotifier).
func (l *Link) NotifyState(f func(up bool)) { l.state.NotifyState(f) }

// setUp records the link's state and reports a change.
func (l *Link) setUp(up bool, why string, err error) {
	if !l.state.Set(up) || l.closed.Load() {
		return
	}
	l.log.Warn("udp: link state changed", "up", up, "why", why, "err", err)
	l.state.Notify(up)
}

// Stats returns the link's counters.
func (l *Link) Stats() link.Stats { return l.ctr.Snapshot() }

// Start starts one reader goroutine per socket; they hand batches of
// received packets to h, possibly concurrently. Datagrams that arrived
// before Start wait in the socket buffers.
func (l *Link) Start(h link.Handler) error {
	if h == nil {
		return errors.New("udp: start: nil handler")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return link.ErrClosed
	}
	if l.started {
		return link.ErrStarted
	}
	rxs := make([]*rxState, len(l.socks))
	for i, s := range l.socks {
		rx, err := l.newRx(s, h)
		if err != nil {
			return fmt.Errorf("udp: start: %w", err)
		}
		rxs[i] = rx
	}
	l.started = true
	l.handler = h
	if err := l.startGroupsLocked(); err != nil {
		return fmt.Errorf("udp: start: %w", err)
	}
	for i, s := range l.socks {
		s.rx.Store(rxs[i])
		l.wg.Add(1)
		go l.readLoop(s, rxs[i])
	}
	return nil
}

// Poll receives what the link's sockets hold now, without waiting, and
// hands it to the Handler on the caller's goroutine, as the reader
// goroutines would (link.Poller). It returns the number of packets handed
// over: 0 if there were none, if a reader was receiving from the socket at
// that moment, or where the platform's receive path cannot be shared
// (only Linux's can). Busy-polling devices call it instead of waiting for
// the readers to wake.
func (l *Link) Poll() int {
	n := 0
	for _, s := range l.socks {
		n += l.pollSocket(s)
	}
	return n
}

// Close closes the sockets and waits for the reader goroutines to exit, so
// it must not be called from the Handler. Later Sends and Starts return
// link.ErrClosed; closing again returns nil.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return nil
	}
	l.closing = true
	l.closed.Store(true)
	extra := l.extra
	l.extra = nil
	for _, sk := range l.groups {
		sk.gone.Store(true)
		extra = append(extra, sk)
	}
	l.groups = nil
	l.mu.Unlock()
	l.stopWait()
	var errs []error
	for _, s := range extra {
		if err := s.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("udp: close %s: %w", s.local, err))
		}
	}
	for _, s := range l.socks {
		if err := s.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("udp: close %s: %w", s.local, err))
		}
	}
	if l.watch != nil {
		l.watch.close()
	}
	l.ns.close()
	l.wg.Wait()
	l.closeWait()
	l.log.Debug("udp: link closed", "addrs", l.addrs, "port", l.port)
	return errors.Join(errs...)
}
