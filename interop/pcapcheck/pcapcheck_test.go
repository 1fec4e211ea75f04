package pcapcheck

import (
	"encoding/binary"
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

	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

var (
	hostA = netip.MustParseAddr("198.18.0.1")
	peerB = netip.MustParseAddr("198.18.0.2")
	host6 = netip.MustParseAddr("fd00:198:18::1")
	peer6 = netip.MustParseAddr("fd00:198:18::2")
)

// frame builds an Ethernet frame holding an RC SEND_ONLY with a correct
// ICRC (IPv4 DF, ID 0, as softrdma sends), then lets mod change it.
func frame(src, dst netip.Addr, payload int, mod func(roce []byte)) []byte {
	roce := make([]byte, wire.BTHLen+payload+wire.ICRCLen)
	roce[0] = 0x04                               // RC SEND_ONLY
	binary.BigEndian.PutUint16(roce[2:], 0xffff) // P_Key
	roce[7] = 0x11                               // dest QP
	binary.BigEndian.PutUint32(roce[8:], 0x80000005)
	for i := range payload {
		roce[wire.BTHLen+i] = byte(i)
	}
	return encap(src, dst, roce, mod)
}

// madFrame builds an Ethernet frame holding a UD SEND_ONLY to QP1 that
// carries a CM MAD with attribute attr (version and class set by classVer,
// normally mad.CMClassVersion), then lets mod change it.
func madFrame(src, dst netip.Addr, attr mad.AttributeID, classVer uint8, mod func(roce []byte)) []byte {
	roce := make([]byte, wire.BTHLen+wire.DETHLen+mad.Size+wire.ICRCLen)
	roce[0] = 0x64                               // UD SEND_ONLY
	binary.BigEndian.PutUint16(roce[2:], 0xffff) // P_Key
	roce[7] = mad.GSIQPN
	binary.BigEndian.PutUint32(roce[8:], 7)
	binary.BigEndian.PutUint32(roce[wire.BTHLen:], mad.GSIQKey)
	roce[wire.BTHLen+7] = mad.GSIQPN // source QP
	m := mad.MAD(roce[wire.BTHLen+wire.DETHLen:][:mad.Size])
	m.SetBaseVersion(mad.BaseVersion)
	m.SetMgmtClass(mad.ClassCM)
	m.SetClassVersion(classVer)
	m.SetMethod(mad.MethodSend)
	m.SetAttributeID(attr)
	return encap(src, dst, roce, mod)
}

// encap seals roce (sets its ICRC), lets mod change it and wraps it in UDP,
// IP (IPv4 DF, ID 0, as softrdma sends) and Ethernet.
func encap(src, dst netip.Addr, roce []byte, mod func(roce []byte)) []byte {
	// The source port Linux would use: UD from its source QP; RC from the
	// pair of QPs 0x11 that frame's packets connect in both directions.
	fr := wire.Framing{Src: src, Dst: dst, SrcPort: wire.ConnectedSourcePort(0, 0x11, 0x11), DstPort: RoCEPort}
	if pkt, err := wire.Parse(roce); err == nil && pkt.DETH() != nil {
		fr.SrcPort = wire.QPSourcePort(pkt.DETH().SrcQP())
	}
	if src.Is4() {
		fr.IPv4Frag = 0x4000
	}
	wire.Seal(&fr, roce)
	if mod != nil {
		mod(roce)
	}
	udp := make([]byte, 8+len(roce))
	binary.BigEndian.PutUint16(udp[0:], fr.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], fr.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], roce)
	eth := make([]byte, 14)
	copy(eth[0:], []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56})
	copy(eth[6:], []byte{0x02, 0, 0, 0, 0, 1})
	var ip []byte
	if src.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip = make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		ip = make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, 17, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		// IPv6 needs a UDP checksum (Linux UDP sockets send one).
		binary.BigEndian.PutUint16(udp[6:], udp6Checksum(s, d, udp))
	}
	return append(append(eth, ip...), udp...)
}

func udp6Checksum(src, dst [16]byte, udp []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	sum += uint32(len(udp)) + 17
	add(udp)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	return c
}

func writePcap(t *testing.T, frames ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, b := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(i), 0), CaptureLength: len(b), Length: len(b)}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestCheck(t *testing.T) {
	badICRC := func(b []byte) { b[len(b)-1] ^= 1 }
	path := writePcap(t,
		frame(hostA, peerB, 64, nil),                                       // 1 good, sent
		frame(peerB, hostA, 64, nil),                                       // 2 good, received
		frame(hostA, peerB, 32, badICRC),                                   // 3 bad ICRC, sent
		frame(peerB, hostA, 0, badICRC),                                    // 4 bad ICRC, received
		frame(host6, peer6, 16, nil),                                       // 5 good IPv6, sent
		frame(host6, peer6, 16, func(b []byte) { b[wire.BTHLen] ^= 0x80 }), // 6 payload changed after sealing
		frame(hostA, peerB, 8, nil)[:20],                                   // 7 cut short: not RoCE at all
	)
	rep, err := Check(path, []netip.Addr{hostA, host6})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Frames != 7 || rep.Sent != 4 || rep.Received != 2 {
		t.Errorf("frames %d sent %d received %d, want 7 4 2", rep.Frames, rep.Sent, rep.Received)
	}
	if len(rep.Problems) != 2 || !strings.HasPrefix(rep.Problems[0], "frame 3 ") || !strings.HasPrefix(rep.Problems[1], "frame 6 ") {
		t.Errorf("problems %q, want frames 3 and 6", rep.Problems)
	}
	if len(rep.ReceivedProblems) != 1 || !strings.HasPrefix(rep.ReceivedProblems[0], "frame 4 ") {
		t.Errorf("received problems %q, want frame 4", rep.ReceivedProblems)
	}
	if rep.SentOps["RC SEND_ONLY"] != 4 || len(rep.SentOps) != 1 {
		t.Errorf("sent opcodes %v", rep.SentOps)
	}
	if want := wire.BTHLen + 64 + wire.ICRCLen; rep.SentMaxLen != want || rep.ReceivedMaxLen != want {
		t.Errorf("largest packets %d sent, %d received, want %d", rep.SentMaxLen, rep.ReceivedMaxLen, want)
	}
	if rep.Err() == nil {
		t.Error("Err() is nil with problems")
	}
	t.Log(rep.Summary())
}

func TestCheckMADs(t *testing.T) {
	path := writePcap(t,
		madFrame(hostA, peerB, mad.AttrREQ, mad.CMClassVersion, nil),     // 1 sent REQ
		madFrame(peerB, hostA, mad.AttrREP, mad.CMClassVersion, nil),     // 2 received REP
		madFrame(hostA, peerB, mad.AttrRTU, mad.CMClassVersion, nil),     // 3 sent RTU
		madFrame(host6, peer6, mad.AttrSIDRReq, mad.CMClassVersion, nil), // 4 sent SIDR_REQ over IPv6
		madFrame(hostA, peerB, mad.AttrDREQ, 1, nil),                     // 5 sent, CM class version 1: not a MAD we know
		frame(hostA, peerB, 64, func(b []byte) { b[7] = mad.GSIQPN }),    // 6 sent RC SEND_ONLY to QP1 (bad ICRC too)
	)
	rep, err := Check(path, []netip.Addr{hostA, host6})
	if err != nil {
		t.Fatal(err)
	}
	if got := opsString(rep.SentMADs); got != "{REQ 1, RTU 1, SIDR_REQ 1}" {
		t.Errorf("sent MADs %s", got)
	}
	if got := opsString(rep.ReceivedMADs); got != "{REP 1}" {
		t.Errorf("received MADs %s", got)
	}
	if rep.SentOps["UD SEND_ONLY"] != 4 || rep.ReceivedOps["UD SEND_ONLY"] != 1 {
		t.Errorf("opcodes sent %v received %v", rep.SentOps, rep.ReceivedOps)
	}
	if len(rep.Problems) != 2 || !strings.HasPrefix(rep.Problems[0], "frame 5 ") || !strings.HasPrefix(rep.Problems[1], "frame 6 ") {
		t.Errorf("problems %q, want frames 5 and 6", rep.Problems)
	}
	if !strings.Contains(rep.Summary(), "MADs sent {REQ 1, RTU 1, SIDR_REQ 1}, received {REP 1}") {
		t.Errorf("summary %q", rep.Summary())
	}
}

func TestCheckTruncatedFrames(t *testing.T) {
	tcp := frame(hostA, peerB, 64, nil)
	tcp[14+9] = 6 // IPv4 protocol TCP
	tcp6 := frame(host6, peer6, 64, nil)
	tcp6[14+6] = 6
	frames := [][]byte{
		frame(hostA, peerB, 64, nil), // 1 RoCE
		tcp,                          // 2 TCP: not RoCE
		frame(peerB, hostA, 64, nil), // 3 RoCE received
		tcp6,                         // 4 TCP over IPv6
		frame(hostA, peerB, 64, nil), // 5 RoCE, cut inside the IP header
		frame(host6, peer6, 64, nil), // 6 RoCE over IPv6, cut inside the UDP header
	}
	snap := []int{60, 60, 60, 70, 14 + 10, 14 + 40 + 2}
	path := filepath.Join(t.TempDir(), "cut.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, b := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(i), 0), CaptureLength: snap[i], Length: len(b)}
		if err := w.WritePacket(ci, b[:snap[i]]); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	rep, err := Check(path, []netip.Addr{hostA, host6})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, strings.Fields(p)[1])
	}
	if strings.Join(got, " ") != "1: 3: 5: 6:" {
		t.Errorf("problems %q: want frames 1, 3, 5 and 6 (the RoCE ones)", rep.Problems)
	}
}

func TestCheckTruncatedFile(t *testing.T) {
	path := writePcap(t, frame(hostA, peerB, 64, nil), frame(hostA, peerB, 64, nil))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10, 30, len(b) - 5} { // 24: a valid empty file
		p := filepath.Join(t.TempDir(), "cut.pcap")
		if err := os.WriteFile(p, b[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Check(p, []netip.Addr{hostA}); err == nil {
			t.Errorf("%d of %d bytes: no error", n, len(b))
		}
	}
}

func TestTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed")
	}
	path := writePcap(t, frame(hostA, peerB, 64, nil), frame(peerB, hostA, 64, nil), frame(host6, peer6, 16, nil))
	senders := []netip.Addr{hostA, host6}
	rep, err := Check(path, senders)
	if err != nil {
		t.Fatal(err)
	}
	if err := Tshark(path, senders, rep); err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	// A packet whose BTH says SEND_ONLY with a header far too short for
	// RDMA_WRITE_ONLY's RETH: tshark must complain.
	bad := frame(hostA, peerB, 4, func(b []byte) { b[0] = 0x0a })
	path = writePcap(t, bad)
	rep, err = Check(path, senders)
	if err != nil {
		t.Fatal(err)
	}
	n := len(rep.Problems)
	if err := Tshark(path, senders, rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) <= n {
		t.Errorf("tshark found nothing wrong with a truncated RDMA WRITE: %q", rep.Problems)
	}
}

func FuzzAdd(f *testing.F) {
	f.Add(frame(hostA, peerB, 64, nil))
	f.Add(frame(host6, peer6, 0, nil))
	f.Add(madFrame(hostA, peerB, mad.AttrREQ, mad.CMClassVersion, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep := newReport()
		rep.add(1, b, []netip.Addr{hostA, host6})
		if rep.Sent+rep.Received > 1 || len(rep.Problems) > rep.Sent {
			t.Fatalf("one frame counted as %d sent, %d received, %d problems", rep.Sent, rep.Received, len(rep.Problems))
		}
	})
}

// TestCheckPorts feeds the source-port check flows of a connection (QPs 0x11
// on one side, 0x12 on the other), a UD packet from QP1, and wrong ports in
// each direction.
func TestCheckPorts(t *testing.T) {
	pair := wire.ConnectedSourcePort(0, 0x11, 0x12)
	rep := newReport()
	rep.flows = []flow{
		{frame: 1, sent: true, op: "RC_SEND_ONLY", sport: pair, dstQP: 0x12},
		{frame: 2, sent: false, op: "RC_ACKNOWLEDGE", sport: pair, dstQP: 0x11},
		{frame: 3, sent: true, op: "UD_SEND_ONLY", sport: wire.QPSourcePort(1), dstQP: 1, srcQP: 1, ud: true},
		{frame: 4, sent: false, op: "RC_SEND_ONLY", sport: wire.FlowSourcePort(0x54321), flowLabel: 0x54321, dstQP: 0x11},
		{frame: 5, sent: true, op: "RC_SEND_ONLY", sport: 4791, dstQP: 0x12},
		{frame: 6, sent: false, op: "UD_SEND_ONLY", sport: pair, dstQP: 1, srcQP: 1, ud: true},
	}
	rep.checkPorts()
	if len(rep.Problems) != 1 || !strings.HasPrefix(rep.Problems[0], "frame 5:") {
		t.Errorf("sent problems %q, want frame 5's", rep.Problems)
	}
	if len(rep.ReceivedProblems) != 1 || !strings.HasPrefix(rep.ReceivedProblems[0], "frame 6:") {
		t.Errorf("received problems %q, want frame 6's", rep.ReceivedProblems)
	}
}

// withTClass sets the IP traffic class of an Ethernet frame from encap
// (the ICRC masks it, so the packet stays sealed).
func withTClass(eth []byte, tc uint8) []byte {
	ip := eth[14:]
	if ip[0]>>4 == 4 {
		ip[1] = tc
	} else {
		ip[0] = ip[0]&0xF0 | tc>>4
		ip[1] = ip[1]&0x0F | tc<<4
	}
	return eth
}

// TestCheckTrafficClasses counts packets by IP traffic class, IPv4 and
// IPv6, each direction, leaving out MADs, and REQs by the traffic class and
// local ACK timeout of their primary path.
func TestCheckTrafficClasses(t *testing.T) {
	setREQ := func(roce []byte) {
		m := mad.MAD(roce[wire.BTHLen+wire.DETHLen:][:mad.Size])
		mad.REQ(m.Data()).PrimaryPath().SetTrafficClass(0xb8)
		mad.REQ(m.Data()).PrimaryPath().SetLocalACKTimeout(16)
	}
	path := writePcap(t,
		withTClass(frame(hostA, peerB, 8, nil), 0xb8),
		withTClass(frame(hostA, peerB, 8, nil), 0xb8),
		withTClass(frame(peerB, hostA, 8, nil), 0x68),
		withTClass(frame(host6, peer6, 8, nil), 0xb8),
		withTClass(frame(peer6, host6, 8, nil), 0x03),
		frame(peerB, hostA, 8, nil),
		withTClass(madFrame(hostA, peerB, mad.AttrREQ, mad.CMClassVersion, setREQ), 0x20),
	)
	rep, err := Check(path, []netip.Addr{hostA, host6})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SentTClasses) != 1 || rep.SentTClasses[0xb8] != 3 {
		t.Errorf("sent traffic classes %v, want {0xb8: 3}", rep.SentTClasses)
	}
	if len(rep.ReceivedTClasses) != 3 || rep.ReceivedTClasses[0x68] != 1 || rep.ReceivedTClasses[0x03] != 1 || rep.ReceivedTClasses[0] != 1 {
		t.Errorf("received traffic classes %v, want {0: 1, 0x03: 1, 0x68: 1}", rep.ReceivedTClasses)
	}
	if len(rep.REQTClasses) != 1 || rep.REQTClasses[0xb8] != 1 {
		t.Errorf("REQ traffic classes %v, want {0xb8: 1}", rep.REQTClasses)
	}
	if len(rep.SentREQACKTimeouts) != 1 || rep.SentREQACKTimeouts[16] != 1 || len(rep.ReceivedREQACKTimeouts) != 0 {
		t.Errorf("REQ ACK timeouts sent %v, received %v; want {16: 1} and none", rep.SentREQACKTimeouts, rep.ReceivedREQACKTimeouts)
	}
	for _, p := range rep.Problems[:max(len(rep.Problems)-1, 0)] {
		t.Errorf("problem: %s", p) // only the REQ changed after sealing may have one
	}
}
