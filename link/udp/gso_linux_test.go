package udp

import (
	"bytes"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"github.com/softrdma/softrdma/wire"
)

// gsoBatch is a batch as a message's packets look: runs of one size to
// one destination, a bigger first packet (it carries a RETH), shorter last
// ones, and a run longer than the kernel's segment limit.
func gsoBatch(src, dst netip.AddrPort) ([]*link.Packet, []int) {
	var sizes []int
	sizes = append(sizes, 1100)
	for range 70 {
		sizes = append(sizes, 1024)
	}
	sizes = append(sizes, 600, 1024, 1024, 300, 64, 64, 64)
	var pkts []*link.Packet
	for i, n := range sizes {
		pkts = append(pkts, linktest.MakePacket(uint32(i), n, src, dst))
	}
	return pkts, sizes
}

// collect starts b with a collector of what it receives.
func collect(t *testing.T, b *Link) *linktest.Collector {
	t.Helper()
	rx := linktest.NewCollector()
	if err := b.Start(rx); err != nil {
		t.Fatal(err)
	}
	return rx
}

// sendBatch sends a gsoBatch from a to b and checks that it arrives
// whole and in order behind the round batches before it. It returns the
// batch's length.
func sendBatch(t *testing.T, a, b *Link, rx *linktest.Collector, round int) int {
	t.Helper()
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	pkts, sizes := gsoBatch(src, dst)
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		link.Put(p)
	}
	got := rx.WaitFor(t, (round+1)*len(sizes))[round*len(sizes):]
	for i, r := range got {
		if msg := linktest.CheckPacket(r, uint32(i), sizes[i], src, dst); msg != "" {
			t.Errorf("packet %d: %s", i, msg)
		}
	}
	return len(sizes)
}

// TestGSO sends runs that the link sends segmented, over IPv4 and IPv6,
// and checks that every packet arrives whole, in order, with an ICRC that
// verifies for the Identification its segment got.
func TestGSO(t *testing.T) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		t.Run(fam, func(t *testing.T) {
			linktest.NoLeaks(t)
			var a, b *Link
			if fam == "ipv4" {
				a, b = pair4(t, Config{})
			} else {
				a, b = pair6(t, Config{})
			}
			if !a.socks[0].gso.Load() {
				t.Skip("this kernel has no UDP_SEGMENT")
			}
			n := sendBatch(t, a, b, collect(t, b), 0)
			sa, sb := a.Stats(), linktest.WaitStats(b, func(s link.Stats) bool { return s.RxPackets == uint64(n) })
			// 1100 | 63 x 1024 (64 would pass 65507 bytes) | 7 x 1024 + 600 |
			// 1024 1024 300 | 64 64 64
			if sa.TxGSOBatches != 5 || sa.TxPackets != uint64(n) || sa.TxErrors != 0 {
				t.Errorf("sender %+v: want 5 GSO sends of %d packets", sa, n)
			}
			// One Send is one sendmmsg; the receiver took fewer calls than
			// packets.
			if sa.TxCalls != 1 || sb.RxCalls == 0 || sb.RxCalls >= sb.RxPackets {
				t.Errorf("sender %d calls, want 1; receiver %d calls for %d packets", sa.TxCalls, sb.RxCalls, sb.RxPackets)
			}
			if sb.RxBadICRC != 0 || sb.RxICRCUnchecked != 0 || (fam == "ipv4") != (sb.RxICRCAnyID > 0) || sb.RxMalformed != 0 {
				t.Errorf("receiver %+v", sb)
			}
			// On loopback a GSO send reaches a GRO socket whole.
			if sb.RxGROBatches == 0 {
				t.Errorf("receiver %+v: nothing arrived coalesced", sb)
			}
			// Datagrams after a message's first are views of the receive
			// buffers, but for one straddling the packet's buffer and the
			// overflow (copied): 61 of the 63 x 1024 run's 62 followers,
			// 71 of the batch's.
			rx := b.socks[0].rx.Load()
			rx.mu.Lock()
			viewed := rx.r.viewed
			rx.mu.Unlock()
			if viewed != 71 {
				t.Errorf("%d packets received as views of the receive buffers", viewed)
			}
			t.Logf("%s: %d GSO sends, %d coalesced receives, %d views", fam, sa.TxGSOBatches, sb.RxGROBatches, viewed)
		})
	}
}

// refusingConn fails every segmented message with EIO, as the kernel does
// when the device cannot checksum the segments.
type refusingConn struct {
	batchConn
	refused int
}

func (c *refusingConn) WriteBatch(ms []ipv4.Message, flags int) (int, error) {
	for i, m := range ms {
		if len(m.OOB) > 0 {
			c.refused++
			if i == 0 {
				return 0, fmt.Errorf("sendmmsg: %w", syscall.EIO)
			}
			n, err := c.batchConn.WriteBatch(ms[:i], flags)
			return n, err
		}
	}
	return c.batchConn.WriteBatch(ms, flags)
}

// TestNoGRO receives the same runs datagram by datagram.
func TestNoGRO(t *testing.T) {
	linktest.NoLeaks(t)
	a, _ := pair4(t, Config{})
	b := open(t, Config{Addrs: []netip.Addr{lo2}, DisableGRO: true})
	sendBatch(t, a, b, collect(t, b), 0)
	if s := b.Stats(); s.RxGROBatches != 0 || s.RxBadICRC != 0 {
		t.Errorf("receiver %+v", s)
	}
}

// TestGSOFallback has the kernel refuse segmentation: the link stops using
// it and sends the packets one by one, sealed for Identification 0, so a
// receiver that accepts only that (StrictIPv4) gets every one.
func TestGSOFallback(t *testing.T) {
	linktest.NoLeaks(t)
	a, _ := pair4(t, Config{})
	b := open(t, Config{Addrs: []netip.Addr{lo2}, ICRCPolicy: StrictIPv4})
	if !a.socks[0].gso.Load() {
		t.Skip("this kernel has no UDP_SEGMENT")
	}
	rc := &refusingConn{batchConn: a.socks[0].bc}
	a.socks[0].bc = rc
	rx := collect(t, b)
	n := sendBatch(t, a, b, rx, 0)
	if rc.refused != 1 || a.socks[0].gso.Load() {
		t.Errorf("refused %d times, GSO still on: %v", rc.refused, a.socks[0].gso.Load())
	}
	if s := a.Stats(); s.TxGSOBatches != 0 || s.TxPackets != uint64(n) || s.TxErrors != 0 {
		t.Errorf("sender %+v", s)
	}
	// The next batch goes out unsegmented from the start.
	sendBatch(t, a, b, rx, 1)
	if rc.refused != 1 {
		t.Errorf("segmentation tried again after the kernel refused it")
	}
}

// toExt moves the bytes of p between at and its last tail bytes out of its
// buffer into a slice of their own (link.Packet.Ext), as a device sending
// a payload from registered memory does, and returns that slice.
func toExt(p *link.Packet, at, tail int) []byte {
	ext := bytes.Clone(p.Buf[at : p.N-tail])
	n := at + copy(p.Buf[at:], p.Buf[p.N-tail:p.N])
	clear(p.Buf[n:p.N])
	p.Ext, p.ExtAt, p.N = ext, at, n
	return ext
}

// TestSendExt: packets whose payload lies outside their buffer
// (link.Packet.Ext) arrive whole, sealed, in order, in GSO runs with
// packets that have none and alone; with a seal hook (a fault link's) the
// payload is copied into the buffer first, so that a hook that changes the
// bytes never writes where the payload came from; a packet whose Ext
// leaves no room for the headers or the ICRC is refused and counted.
func TestSendExt(t *testing.T) {
	linktest.NoLeaks(t)
	a, b := pair4(t, Config{})
	if !a.SendsExt() {
		t.Fatal("the UDP link does not take payloads outside the buffer")
	}
	rx := collect(t, b)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	const per, size = 24, 200 // waitInOrder checks 200-byte packets
	seq := uint32(0)
	// send sends per packets, two in three with their payload outside the
	// buffer (so that runs mix both kinds), and returns those payloads and
	// copies of them made before the send.
	send := func() (exts, kept [][]byte) {
		t.Helper()
		pkts := linktest.MakePackets(seq, per, size, src, dst)
		for i, p := range pkts {
			if i%3 != 2 {
				e := toExt(p, 40+i%5, 4+i%4)
				exts, kept = append(exts, e), append(kept, bytes.Clone(e))
			}
		}
		if err := a.Send(pkts); err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			link.Put(p)
		}
		seq += per
		return exts, kept
	}
	send()
	waitInOrder(t, rx, seq, src, dst)
	if st := a.Stats(); st.TxGSOBatches == 0 || st.TxPackets != per {
		t.Fatalf("sent %d packets in %d GSO runs, want %d in some", st.TxPackets, st.TxGSOBatches, per)
	}

	// A hook that corrupts what it is given (as link/fault does): the
	// payloads outside the buffers stay as they were.
	a.SetSealHook(func(b []byte) { b[len(b)-1] ^= 0xff })
	exts, kept := send()
	a.SetSealHook(nil)
	for i := range exts {
		if !bytes.Equal(exts[i], kept[i]) {
			t.Fatalf("the hook's change reached payload %d outside the buffer", i)
		}
	}
	// b drops them all: their ICRCs were spoilt after sealing.
	deadline := time.Now().Add(linktest.Timeout)
	for b.Stats().RxBadICRC < per && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := b.Stats().RxBadICRC; n != per {
		t.Fatalf("%d packets dropped for their ICRC, want %d", n, per)
	}

	p := linktest.MakePacket(seq, size, src, dst)
	toExt(p, wire.BTHLen-1, 4)
	errs := a.Stats().TxErrors
	if err := a.Send([]*link.Packet{p}); err == nil || a.Stats().TxErrors != errs+1 {
		t.Fatalf("a packet with its BTH outside the buffer: %v, %d errors", err, a.Stats().TxErrors-errs)
	}
	link.Put(p)
}
