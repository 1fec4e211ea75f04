// Package pcap taps a link: every packet a device sends or receives is
// written to a pcap file that Wireshark and tshark decode as RoCEv2.
//
// A link carries only UDP payloads (BTH through ICRC) and their endpoints, so
// the tap rebuilds the IP and UDP headers around each packet, as link/udp
// sends them: IPv4 with Identification 0, Don't Fragment, TTL 64, the
// packet's traffic class (link.Packet.TClass) as TOS and a correct header
// checksum, or IPv6 with hop limit 64, the packet's traffic class and flow
// label 0; UDP with a correct checksum. Received packets are written with
// the traffic class the link reports (link/udp reports 0: a UDP socket does
// not see the sender's). The file has link type RAW (101):
// each record starts at the IP header.
//
// Sent packets are written with the source address the link sends from and
// an ICRC sealed for it, so their ICRC verifies in the file.
// For received packets a UDP socket does not see the sender's IP header:
// for IPv4 the tap writes the Identification and Don't Fragment flag with
// which the packet's ICRC verifies (wire.IPv4HeaderFor; the packet's own
// unless its ICRC was corrupted, which the link would have dropped), so
// packets from Linux rxe, whose Identifications vary, and later segments of
// GSO sends show the header they had on the wire. Received IPv6 packets
// verify (their ICRC covers nothing the tap has to guess). A sent IPv4
// packet that link/udp sends as a later segment of a GSO run or from a
// connected source-port socket is written as sealed for Identification 0
// (its ICRC on the wire is sealed for the Identification segmentation or
// the socket's counter gives it). Packets a link refuses to send (Send returns an error)
// may still appear in the file; packets the inner link drops on receive (bad
// ICRC, too short) never reach the tap and do not.
package pcap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// SnapLen is the snapshot length in the file header: larger than any packet
// the tap writes.
const SnapLen = 65535

// LinkType is the link type of the files the tap writes (raw IP).
const LinkType = layers.LinkTypeRaw

// Writer writes RoCEv2 packets as pcap records with rebuilt IP and UDP
// headers. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	bw   *bufio.Writer
	pw   *pcapgo.Writer
	c    io.Closer // closed by Close, if not nil
	buf  gopacket.SerializeBuffer
	now  func() time.Time
	err  error // first write error; later writes are skipped
	nPkt uint64
}

// NewWriter writes a pcap file header to w and returns a Writer appending
// records to it. Close flushes the records and closes w if it is an
// io.Closer.
func NewWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(SnapLen, LinkType); err != nil {
		return nil, fmt.Errorf("pcap: write header: %w", err)
	}
	out := &Writer{bw: bw, pw: pw, buf: gopacket.NewSerializeBuffer(), now: time.Now}
	if c, ok := w.(io.Closer); ok {
		out.c = c
	}
	return out, nil
}

// Create creates (or truncates) the file at path and returns a Writer on it.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("pcap: %w", err)
	}
	w, err := NewWriter(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Frame returns the IP packet (IPv4 or IPv6 after the family of src) that
// carries the RoCEv2 UDP payload pkt from src to dst, framed as described in
// the package documentation. Zones are ignored.
func Frame(src, dst netip.AddrPort, pkt []byte) ([]byte, error) {
	buf := gopacket.NewSerializeBuffer()
	if err := frame(buf, src, dst, 0, pkt); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func frame(buf gopacket.SerializeBuffer, src, dst netip.AddrPort, tclass uint8, pkt []byte) error {
	s, d := src.Addr().Unmap().WithZone(""), dst.Addr().Unmap().WithZone("")
	if !s.IsValid() || !d.IsValid() || s.Is4() != d.Is4() {
		return fmt.Errorf("pcap: cannot frame %v -> %v", src, dst)
	}
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	var ip gopacket.SerializableLayer
	if s.Is4() {
		ip4 := &layers.IPv4{
			Version: 4, IHL: 5, TOS: tclass, TTL: 64, Flags: layers.IPv4DontFragment,
			Protocol: layers.IPProtocolUDP, SrcIP: net.IP(s.AsSlice()), DstIP: net.IP(d.AsSlice()),
		}
		fr := wire.Framing{Src: s, Dst: d, SrcPort: src.Port(), DstPort: dst.Port(), IPv4Frag: wire.IPv4DontFragment}
		if id, frag, ok := wire.IPv4HeaderFor(&fr, pkt); ok {
			ip4.Id = id
			if frag == 0 {
				ip4.Flags = 0
			}
		}
		if err := udp.SetNetworkLayerForChecksum(ip4); err != nil {
			return err
		}
		ip = ip4
	} else {
		ip6 := &layers.IPv6{
			Version: 6, TrafficClass: tclass, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.IP(s.AsSlice()), DstIP: net.IP(d.AsSlice()),
		}
		if err := udp.SetNetworkLayerForChecksum(ip6); err != nil {
			return err
		}
		ip = ip6
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	return gopacket.SerializeLayers(buf, opts, ip, udp, gopacket.Payload(pkt))
}

// WritePacket appends one record: pkt (BTH through ICRC) from src to dst,
// with traffic class 0.
func (w *Writer) WritePacket(src, dst netip.AddrPort, pkt []byte) error {
	return w.WritePacketClass(src, dst, 0, pkt)
}

// WritePacketClass appends one record: pkt (BTH through ICRC) from src to
// dst, with tclass as the IPv4 TOS byte or IPv6 Traffic Class.
func (w *Writer) WritePacketClass(src, dst netip.AddrPort, tclass uint8, pkt []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := frame(w.buf, src, dst, tclass, pkt); err != nil {
		return err
	}
	data := w.buf.Bytes()
	ci := gopacket.CaptureInfo{Timestamp: w.now(), CaptureLength: len(data), Length: len(data)}
	if err := w.pw.WritePacket(ci, data); err != nil {
		w.err = fmt.Errorf("pcap: write: %w", err)
		return w.err
	}
	w.nPkt++
	return nil
}

// Packets returns the number of records written.
func (w *Writer) Packets() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nPkt
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("pcap: flush: %w", err)
	}
	return w.err
}

// Close flushes the records and closes the underlying writer if it is an
// io.Closer. Writes after Close fail.
func (w *Writer) Close() error {
	err := w.Flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c != nil {
		err = errors.Join(err, w.c.Close())
		w.c = nil
	}
	if w.err == nil {
		w.err = errClosed
	}
	return err
}

var errClosed = errors.New("pcap: writer closed")

// sourcePorter is a link that says which source port a packet from src
// asking for port leaves from (link/udp).
type sourcePorter interface {
	SourcePort(src netip.Addr, port uint16) uint16
}

// Link is a link.Link that passes everything to an inner link and writes
// each packet sent and received to a Writer.
type Link struct {
	inner link.Link
	w     *Writer
	addrs []netip.Addr
	log   func(error)
	once  sync.Once
}

// Tap returns a Link wrapping inner that records to w. Closing the Link
// closes inner, then w. onErr, if not nil, is called once with the first
// error writing the file; the traffic goes on regardless.
func Tap(inner link.Link, w *Writer, onErr func(error)) *Link {
	return &Link{inner: inner, w: w, addrs: inner.Addrs(), log: onErr}
}

// Addrs returns the inner link's addresses.
func (l *Link) Addrs() []netip.Addr { return l.inner.Addrs() }

// Port returns the inner link's port.
func (l *Link) Port() uint16 { return l.inner.Port() }

// Stats returns the inner link's counters.
func (l *Link) Stats() link.Stats { return l.inner.Stats() }

// Up reports the inner link's state (link.StateNotifier); a link that does
// not report one is always up.
func (l *Link) Up() bool {
	if sn, ok := l.inner.(link.StateNotifier); ok {
		return sn.Up()
	}
	return true
}

// NotifyState passes f to the inner link, if it reports its state, so a
// device on the tap sees the same port events as one on the inner link.
func (l *Link) NotifyState(f func(up bool)) {
	if sn, ok := l.inner.(link.StateNotifier); ok {
		sn.NotifyState(f)
	}
}

// Send records the batch and sends it through the inner link. Records are
// written first, so that they come before any answer the reader records; the
// tap seals each packet's ICRC for the framing link/udp uses (the inner link
// seals it again, to the same value for link/udp).
func (l *Link) Send(batch []*link.Packet) error {
	port := l.inner.Port()
	for _, p := range batch {
		if p == nil || p.N < wire.BTHLen+wire.ICRCLen || p.N > len(p.Buf) {
			continue
		}
		src := l.source(p.Src.Addr(), p.Dst.Addr())
		if !src.IsValid() || src.Is4() != p.Dst.Addr().Unmap().Is4() {
			continue // the inner link refuses it
		}
		sport := port // the packet's own port if it asks for one and the link honours it
		if sp, ok := l.inner.(sourcePorter); ok {
			sport = sp.SourcePort(src, p.Src.Port())
		} else if p.Src.Port() != 0 {
			sport = p.Src.Port()
		}
		fr := wire.Framing{Src: src, Dst: p.Dst.Addr().Unmap(), SrcPort: sport, DstPort: p.Dst.Port(),
			IPv4Frag: wire.IPv4DontFragment}
		wire.Seal(&fr, p.Data())
		l.record(netip.AddrPortFrom(src, sport), p.Dst, p.TClass, p.Data())
	}
	return l.inner.Send(batch)
}

// source returns the local address a packet to dst leaves from: its given
// source, or the link's first address of dst's family (what link/udp does).
func (l *Link) source(src, dst netip.Addr) netip.Addr {
	if src.IsValid() {
		return src.Unmap()
	}
	want4 := dst.Unmap().Is4()
	for _, a := range l.addrs {
		if a.Unmap().Is4() == want4 {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

func (l *Link) record(src, dst netip.AddrPort, tclass uint8, pkt []byte) {
	if err := l.w.WritePacketClass(src, dst, tclass, pkt); err != nil && l.log != nil {
		l.once.Do(func() { l.log(err) })
	}
}

// ReserveSourcePort passes the reservation to the inner link, if it takes
// one (link.SourcePortReserver).
func (l *Link) ReserveSourcePort(src netip.Addr, port uint16) {
	if r, ok := l.inner.(link.SourcePortReserver); ok {
		r.ReserveSourcePort(src, port)
	}
}

// JoinGroup joins the group on inner (link.Multicaster); packets to it are
// recorded as others are. The error wraps errors.ErrUnsupported if inner
// cannot join groups.
func (l *Link) JoinGroup(group netip.Addr) error {
	if m, ok := l.inner.(link.Multicaster); ok {
		return m.JoinGroup(group)
	}
	return fmt.Errorf("pcap: join %s: %T: %w", group, l.inner, errors.ErrUnsupported)
}

// LeaveGroup leaves the group on inner (link.Multicaster).
func (l *Link) LeaveGroup(group netip.Addr) error {
	if m, ok := l.inner.(link.Multicaster); ok {
		return m.LeaveGroup(group)
	}
	return fmt.Errorf("pcap: leave %s: %T: %w", group, l.inner, errors.ErrUnsupported)
}

// Poll polls inner if it is a link.Poller (what it receives is recorded
// as the reader's is), and returns 0 otherwise.
func (l *Link) Poll() int {
	if p, ok := l.inner.(link.Poller); ok {
		return p.Poll()
	}
	return 0
}

// PollWait passes the wait to inner if it is a link.Waiter, and reports
// that it cannot wait otherwise.
func (l *Link) PollWait(timeout time.Duration, ready func() bool) (int, bool) {
	if w, ok := l.inner.(link.Waiter); ok {
		return w.PollWait(timeout, ready)
	}
	return 0, false
}

// Wake wakes inner's PollWait if it is a link.Waiter.
func (l *Link) Wake() {
	if w, ok := l.inner.(link.Waiter); ok {
		w.Wake()
	}
}

// Start starts the inner link with a handler that records each received
// packet and then hands the batch to h.
func (l *Link) Start(h link.Handler) error {
	return l.inner.Start(link.HandlerFunc(func(batch []*link.Packet) {
		for _, p := range batch {
			l.record(p.Src, p.Dst, p.TClass, p.Data())
		}
		h.Receive(batch)
	}))
}

// Close closes the inner link, then the writer.
func (l *Link) Close() error {
	return errors.Join(l.inner.Close(), l.w.Close())
}
