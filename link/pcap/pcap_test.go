package pcap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/link/pcap"
	"github.com/softrdma/softrdma/link/udp"
	"github.com/softrdma/softrdma/wire"
)

// sum16 is the Internet checksum's one's-complement sum of b.
func sum16(s uint32, b []byte) uint32 {
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checkFrame checks the rebuilt headers of one record: what link/udp sends,
// with correct checksums, and an ICRC that verifies.
func checkFrame(t *testing.T, ip []byte, src, dst netip.AddrPort) {
	t.Helper()
	fr, payload, err := wire.SplitIP(ip)
	if err != nil {
		t.Fatalf("SplitIP: %v", err)
	}
	if fr.Src != src.Addr() || fr.Dst != dst.Addr() || fr.SrcPort != src.Port() || fr.DstPort != dst.Port() {
		t.Errorf("framing %v:%d > %v:%d, want %v > %v", fr.Src, fr.SrcPort, fr.Dst, fr.DstPort, src, dst)
	}
	if !wire.VerifyICRC(&fr, payload) {
		t.Errorf("ICRC does not verify in the file")
	}
	if _, err := wire.Parse(payload); err != nil {
		t.Errorf("Parse: %v", err)
	}
	var pseudo uint32
	udpSeg := ip[len(ip)-len(payload)-8:]
	if fr.IsIPv4() {
		h := ip[:20]
		if fold(sum16(0, h)) != 0xffff {
			t.Errorf("IPv4 header checksum wrong: % x", h)
		}
		// The TOS byte is the packet's traffic class (TestTapRecordsTrafficClass).
		if id, frag, ttl := binary.BigEndian.Uint16(h[4:]), binary.BigEndian.Uint16(h[6:]), h[8]; id != 0 || frag != wire.IPv4DontFragment || ttl != 64 {
			t.Errorf("IPv4 id %d frag 0x%04x ttl %d, want 0, DF, 64", id, frag, ttl)
		}
		pseudo = sum16(sum16(0, h[12:20]), []byte{0, 17})
	} else {
		if ip[7] != 64 {
			t.Errorf("IPv6 hop limit %d, want 64", ip[7])
		}
		pseudo = sum16(sum16(0, ip[8:40]), []byte{0, 17})
	}
	pseudo += uint32(len(udpSeg))
	if fold(sum16(pseudo, udpSeg)) != 0xffff {
		t.Errorf("UDP checksum wrong")
	}
}

// echo receives on l and sends each packet back to its source; a failed
// send is reported on errs.
type echo struct {
	l    link.Link
	errs chan error
}

func (e echo) Receive(batch []*link.Packet) {
	for _, p := range batch {
		q := link.Get()
		q.N = copy(q.Buf, p.Data())
		q.Dst = p.Src
		if err := e.l.Send([]*link.Packet{q}); err != nil {
			select {
			case e.errs <- err:
			default:
			}
		}
		link.Put(q)
	}
}

func TestTapRecordsBothWays(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "::1"} {
		t.Run(addr, func(t *testing.T) {
			a := netip.MustParseAddr(addr)
			inner, err := udp.Open(udp.Config{Addrs: []netip.Addr{a}})
			if err != nil {
				t.Skipf("cannot bind %s: %v", addr, err)
			}
			peer, err := udp.Open(udp.Config{Addrs: []netip.Addr{a}})
			if err != nil {
				inner.Close()
				t.Fatal(err)
			}
			defer peer.Close()
			echoErrs := make(chan error, 1)
			if err := peer.Start(echo{peer, echoErrs}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "tap.pcap")
			w, err := pcap.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			tap := pcap.Tap(inner, w, func(err error) { t.Errorf("tap: %v", err) })
			got := make(chan []byte, 1)
			if err := tap.Start(link.HandlerFunc(func(b []*link.Packet) {
				for _, p := range b {
					select {
					case got <- append([]byte(nil), p.Data()...):
					default:
					}
				}
			})); err != nil {
				t.Fatal(err)
			}
			h := &wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 77, AckReq: true}}
			p := link.Get()
			n, err := wire.Build(p.Buf, h, []byte("hello, pcap tap"))
			if err != nil {
				t.Fatal(err)
			}
			p.N = n
			p.Src, p.Dst = netip.AddrPort{}, netip.AddrPortFrom(a, peer.Port()) // the link picks the source
			if err := tap.Send([]*link.Packet{p}); err != nil {
				t.Fatal(err)
			}
			link.Put(p)
			select {
			case <-got:
			case err := <-echoErrs:
				t.Fatalf("echo: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatalf("no echo: inner %+v, peer %+v", inner.Stats(), peer.Stats())
			}
			if err := tap.Close(); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := pcapgo.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			if r.LinkType() != layers.LinkTypeRaw {
				t.Errorf("link type %v, want raw", r.LinkType())
			}
			me := netip.AddrPortFrom(a, inner.Port())
			them := netip.AddrPortFrom(a, peer.Port())
			for i, want := range [][2]netip.AddrPort{{me, them}, {them, me}} {
				data, _, err := r.ReadPacketData()
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				checkFrame(t, data, want[0], want[1])
			}
			if _, _, err := r.ReadPacketData(); !errors.Is(err, io.EOF) {
				t.Errorf("more than two records: %v", err)
			}
			if tshark, err := exec.LookPath("tshark"); err == nil {
				out, err := exec.Command(tshark, "-r", path,
					"-d", fmt.Sprintf("udp.port==%d,infiniband", peer.Port()), "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
					"-T", "fields", "-e", "infiniband.bth.opcode", "-e", "ip.checksum.status", "-e", "udp.checksum.status", "-e", "_ws.malformed").CombinedOutput()
				if err != nil {
					t.Fatalf("tshark: %v\n%s", err, out)
				}
				for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					if strings.Contains(line, "Running as") {
						continue
					}
					f := strings.Split(line, "\t")
					// Opcode 4 (RC SEND ONLY); checksum status 1 is good; no malformed mark.
					if f[0] != "4" || (f[1] != "" && f[1] != "1") || f[2] != "1" || (len(f) > 3 && f[3] != "") {
						t.Errorf("tshark: %q", line)
					}
				}
			}
		})
	}
}

func TestWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	v4 := netip.MustParseAddrPort("192.0.2.1:4791")
	v6 := netip.MustParseAddrPort("[2001:db8::1]:4791")
	if err := w.WritePacket(v4, v6, make([]byte, 16)); err == nil {
		t.Error("mixed families framed")
	}
	if err := w.WritePacket(netip.AddrPort{}, v4, make([]byte, 16)); err == nil {
		t.Error("invalid source framed")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(v4, v4, make([]byte, 16)); err == nil {
		t.Error("write after Close succeeded")
	}
	if buf.Len() != 24 || w.Packets() != 0 {
		t.Errorf("file has %d bytes and %d records, want a bare 24-byte header", buf.Len(), w.Packets())
	}
}

// TestTapPassesLinkState: a device on the tap sees the inner link's state,
// so --pcap does not hide port events.
func TestTapPassesLinkState(t *testing.T) {
	n := loop.NewNetwork(loop.Config{})
	inner, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tap := pcap.Tap(inner, w, nil)
	defer tap.Close()
	var sn link.StateNotifier = tap
	changes := make(chan bool, 2)
	sn.NotifyState(func(up bool) { changes <- up })
	if !sn.Up() {
		t.Fatal("tap of a new link is down")
	}
	inner.SetUp(false)
	select {
	case up := <-changes:
		if up || sn.Up() {
			t.Fatalf("after SetUp(false): change up=%v, Up()=%v", up, sn.Up())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no state change reached the tap's listener")
	}
}

// TestFrameRecoversIPv4Header frames a packet sealed for an IPv4
// Identification and flags other than 0 and DF, as a received packet from
// rxe or a later GSO segment is: the record carries them, so its ICRC
// verifies in the file.
func TestFrameRecoversIPv4Header(t *testing.T) {
	src, dst := netip.MustParseAddrPort("192.0.2.1:49152"), netip.MustParseAddrPort("192.0.2.2:4791")
	for _, c := range []struct {
		id   uint16
		frag uint16
	}{{0, wire.IPv4DontFragment}, {0x1234, wire.IPv4DontFragment}, {7, 0}} {
		pkt := make([]byte, 12+64+4)
		pkt[0] = 4 // SEND_ONLY
		fr := wire.Framing{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(), IPv4ID: c.id, IPv4Frag: c.frag}
		wire.Seal(&fr, pkt)
		b, err := pcap.Frame(src, dst, pkt)
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(b, layers.LayerTypeIPv4, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil || ip.Id != c.id || (ip.Flags&layers.IPv4DontFragment != 0) != (c.frag != 0) {
			t.Fatalf("sealed for ID %#x frag %#x, framed as %+v", c.id, c.frag, ip)
		}
	}
}
