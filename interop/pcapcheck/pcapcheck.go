// Package pcapcheck checks captured RoCEv2 traffic: every packet a given
// sender put on the wire must carry an ICRC that is right for the IP header
// actually sent, must parse, and must be decoded by tshark as InfiniBand
// without a malformed-packet or error-level expert item.
package pcapcheck

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// RoCEPort is the RoCEv2 UDP destination port.
const RoCEPort = 4791

// Report sums up one capture.
type Report struct {
	Frames int // all frames in the file
	// Sent and Received count RoCEv2 packets from and to the checked
	// addresses.
	Sent, Received int
	// SentOps and ReceivedOps count packets by opcode name.
	SentOps, ReceivedOps map[string]int
	// Problems lists what is wrong with sent packets, one line each, with
	// the frame number. ReceivedProblems does the same for the other
	// direction (the peer's packets).
	Problems, ReceivedProblems []string
	// SentNAKs and ReceivedNAKs count packets whose AETH is a NAK;
	// SentRepeats and ReceivedRepeats count packets other than ACKs that
	// repeat an earlier packet's destination QP, PSN and opcode
	// (retransmissions).
	SentNAKs, ReceivedNAKs       int
	SentRepeats, ReceivedRepeats int
	// SentMaxLen and ReceivedMaxLen are the largest RoCE packets (BTH to
	// ICRC, in bytes) in each direction.
	SentMaxLen, ReceivedMaxLen int
	// SentMADs and ReceivedMADs count the MADs on QP1 (the GSI: the CM's
	// REQ, REP, RTU, DREQ, SIDR_REQ...) by message name: the CM attribute
	// name for class CM, "class/attribute" otherwise. They are also
	// counted in SentOps and ReceivedOps as UD SEND_ONLY. A packet to QP1
	// whose payload is not a MAD is a problem.
	SentMADs, ReceivedMADs map[string]int
	// SentTClasses and ReceivedTClasses count the RoCE packets other than
	// MADs (those not to QP1) by IP traffic class: the IPv4 TOS byte or
	// the IPv6 Traffic Class. REQTClasses counts the CM REQs in either
	// direction by their primary path's traffic class.
	SentTClasses, ReceivedTClasses, REQTClasses map[uint8]int
	// SentREQACKTimeouts and ReceivedREQACKTimeouts count the CM REQs each
	// way by their primary path's local ACK timeout.
	SentREQACKTimeouts, ReceivedREQACKTimeouts map[uint8]int

	seen       map[seenKey]bool
	flows      []flow   // every RoCE packet, for the source-port check
	flowLabels []uint32 // the primary path flow labels of every REQ
}

// flow is what the source-port check needs of a packet.
type flow struct {
	frame     int
	sent      bool
	op        string
	sport     uint16
	flowLabel uint32 // IPv6 only; 0 if none
	dstQP     wire.QPN
	srcQP     wire.QPN // UD (DETH) only
	ud        bool
}

type seenKey struct {
	dst    netip.Addr
	qpn    wire.QPN
	psn    wire.PSN
	opcode wire.Opcode
}

// Err returns the report's sent-packet problems as one error, or nil.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("%d problems in sent packets:\n%s", len(r.Problems), strings.Join(r.Problems, "\n"))
}

// Summary is a one-line account of the report.
func (r *Report) Summary() string {
	s := fmt.Sprintf("%d frames; sent %d RoCE packets %s, %d NAKs, %d repeats, largest %d B; received %d %s, %d NAKs, %d repeats, largest %d B",
		r.Frames, r.Sent, opsString(r.SentOps), r.SentNAKs, r.SentRepeats, r.SentMaxLen,
		r.Received, opsString(r.ReceivedOps), r.ReceivedNAKs, r.ReceivedRepeats, r.ReceivedMaxLen)
	if len(r.SentMADs)+len(r.ReceivedMADs) > 0 {
		s += fmt.Sprintf("; MADs sent %s, received %s", opsString(r.SentMADs), opsString(r.ReceivedMADs))
	}
	return s
}

func opsString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

// Check reads an Ethernet pcap file and checks each RoCEv2 packet (UDP
// destination port 4791) whose source is one of senders.
func Check(path string, senders []netip.Addr) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("pcapcheck: %s: %w", path, err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("pcapcheck: %s: link type %v, want Ethernet", path, r.LinkType())
	}
	rep := newReport()
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, fmt.Errorf("pcapcheck: %s: frame %d: %w", path, rep.Frames+1, err)
		}
		rep.Frames++
		if ci.CaptureLength < ci.Length {
			// Only RoCE frames need to be whole; the snap length covers
			// the link's MTU, but TCP frames merged by the host stack (the
			// agent's replies, say) can exceed it.
			if mayBeRoCE(data) {
				rep.Problems = append(rep.Problems, fmt.Sprintf("frame %d: truncated by the capture (%d of %d bytes)", rep.Frames, ci.CaptureLength, ci.Length))
			}
			continue
		}
		rep.add(rep.Frames, data, senders)
	}
	rep.checkPorts()
	return rep, nil
}

// checkPorts checks every packet's UDP source port as Linux chooses it
// (wire/srcport.go): a UD packet's comes from its source QP (DETH); a
// connected QP's from its flow label (IPv6 carries it; a REQ in the
// capture gives it for a connection rdma_cm set up) or, without one, from
// its QP pair, whose local QP is one the other side sent packets to.
// Where the other side sent nothing to a QP but QP1 (one-way UC traffic),
// the pair is unknown and only the port's range is checked.
func (rep *Report) checkPorts() {
	addressed := [2]map[wire.QPN]bool{{}, {}} // by direction (sent = 1): destination QPs
	for _, f := range rep.flows {
		if f.dstQP != mad.GSIQPN {
			addressed[b2i(f.sent)][f.dstQP] = true
		}
	}
	for _, f := range rep.flows {
		var want []uint16
		switch {
		case f.ud:
			want = append(want, wire.QPSourcePort(f.srcQP))
		case len(addressed[1-b2i(f.sent)]) == 0:
			if f.sport >= wire.SourcePortBase {
				continue
			}
		default:
			if f.flowLabel != 0 {
				want = append(want, wire.FlowSourcePort(f.flowLabel))
			}
			for _, fl := range rep.flowLabels {
				want = append(want, wire.FlowSourcePort(fl))
			}
			for a := range addressed[1-b2i(f.sent)] {
				want = append(want, wire.ConnectedSourcePort(0, a, f.dstQP))
			}
		}
		if slices.Contains(want, f.sport) {
			continue
		}
		slices.Sort(want)
		problem := fmt.Sprintf("frame %d: %s to QP %#x from UDP port %#x, want one of %#x (Linux's source port for its QP)",
			f.frame, f.op, uint32(f.dstQP), f.sport, want)
		if f.sent {
			rep.Problems = append(rep.Problems, problem)
		} else {
			rep.ReceivedProblems = append(rep.ReceivedProblems, problem)
		}
	}
}

func newReport() *Report {
	return &Report{SentOps: map[string]int{}, ReceivedOps: map[string]int{},
		SentMADs: map[string]int{}, ReceivedMADs: map[string]int{}, seen: map[seenKey]bool{},
		SentTClasses: map[uint8]int{}, ReceivedTClasses: map[uint8]int{}, REQTClasses: map[uint8]int{},
		SentREQACKTimeouts: map[uint8]int{}, ReceivedREQACKTimeouts: map[uint8]int{}}
}

// add checks one Ethernet frame.
func (rep *Report) add(n int, frame []byte, senders []netip.Addr) {
	ip, ok := ethernetIP(frame)
	if !ok {
		return
	}
	fr, roce, err := wire.SplitIP(ip)
	if err != nil || fr.DstPort != RoCEPort {
		return // not RoCE: ARP, ND, the TCP exchange...
	}
	sent := false
	for _, s := range senders {
		if fr.Src == s {
			sent = true
		}
	}
	var problem string
	op, madName := "?", ""
	nak, repeat := false, false
	if pkt, perr := wire.Parse(roce); perr != nil {
		problem = fmt.Sprintf("does not parse: %v", perr)
	} else {
		op = pkt.Opcode().String()
		if pkt.BTH().DestQP() == mad.GSIQPN {
			if m, merr := mad.Parse(pkt.Payload()); merr != nil || pkt.Opcode() != wire.UDSendOnly {
				problem = fmt.Sprintf("%s to QP1 is not a MAD: %v", op, merr)
			} else {
				madName = madString(m)
				if m.MgmtClass() == mad.ClassCM && m.AttributeID() == mad.AttrREQ {
					if fl := mad.REQ(m.Data()).PrimaryPath().FlowLabel(); fl != 0 {
						rep.flowLabels = append(rep.flowLabels, fl)
					}
					pp := mad.REQ(m.Data()).PrimaryPath()
					rep.REQTClasses[pp.TrafficClass()]++
					if sent {
						rep.SentREQACKTimeouts[pp.LocalACKTimeout()]++
					} else {
						rep.ReceivedREQACKTimeouts[pp.LocalACKTimeout()]++
					}
				}
			}
		} else if sent {
			rep.SentTClasses[ipTClass(ip)]++
		} else {
			rep.ReceivedTClasses[ipTClass(ip)]++
		}
		if a := pkt.AETH(); a != nil {
			nak = a.Syndrome().IsNAK()
		}
		if pkt.Opcode() != wire.RCAcknowledge {
			k := seenKey{fr.Dst, pkt.BTH().DestQP(), pkt.BTH().PSN(), pkt.Opcode()}
			repeat = rep.seen[k]
			rep.seen[k] = true
		}
		f := flow{frame: n, sent: sent, op: op, sport: fr.SrcPort, dstQP: pkt.BTH().DestQP()}
		if ip[0]>>4 == 6 && len(ip) >= 4 {
			f.flowLabel = binary.BigEndian.Uint32(ip[0:4]) & 0xFFFFF
		}
		if d := pkt.DETH(); d != nil {
			f.ud, f.srcQP = true, d.SrcQP()
		}
		rep.flows = append(rep.flows, f)
	}
	if sent {
		rep.SentMaxLen = max(rep.SentMaxLen, len(roce))
		rep.SentNAKs += b2i(nak)
		rep.SentRepeats += b2i(repeat)
	} else {
		rep.ReceivedMaxLen = max(rep.ReceivedMaxLen, len(roce))
		rep.ReceivedNAKs += b2i(nak)
		rep.ReceivedRepeats += b2i(repeat)
	}
	if problem == "" && !wire.VerifyICRC(&fr, roce) {
		problem = fmt.Sprintf("%s: ICRC %08x is wrong for its IP header (want %08x)", op,
			binary.LittleEndian.Uint32(roce[len(roce)-wire.ICRCLen:]), wire.ICRC(&fr, roce))
	}
	if madName != "" {
		if sent {
			rep.SentMADs[madName]++
		} else {
			rep.ReceivedMADs[madName]++
		}
	}
	if sent {
		rep.Sent++
		rep.SentOps[op]++
		if problem != "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("frame %d %v->%v: %s", n, fr.Src, fr.Dst, problem))
		}
	} else {
		rep.Received++
		rep.ReceivedOps[op]++
		if problem != "" {
			rep.ReceivedProblems = append(rep.ReceivedProblems, fmt.Sprintf("frame %d %v->%v: %s", n, fr.Src, fr.Dst, problem))
		}
	}
}

// ipTClass returns the traffic class of an IP header: the IPv4 TOS byte
// or the IPv6 Traffic Class (SplitIP has checked the header is there).
func ipTClass(ip []byte) uint8 {
	if ip[0]>>4 == 4 {
		return ip[1]
	}
	return ip[0]<<4 | ip[1]>>4
}

// madString names a MAD: the CM message ("REQ"), or its class and
// attribute.
func madString(m mad.MAD) string {
	if m.MgmtClass() == mad.ClassCM {
		return m.AttributeID().String()
	}
	return fmt.Sprintf("%v/%v", m.MgmtClass(), m.AttributeID())
}

// mayBeRoCE reports whether a frame cut short by the capture could be a
// RoCEv2 packet: IP with UDP to RoCEPort, or headers too short or unusual to
// tell.
func mayBeRoCE(frame []byte) bool {
	ip, ok := ethernetIP(frame)
	if !ok {
		return false
	}
	var proto byte
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < 20 {
			return true
		}
		hl := int(ip[0]&0x0f) * 4
		proto = ip[9]
		if len(ip) >= hl {
			l4 = ip[hl:]
		}
	case 6:
		if len(ip) < 40 {
			return true
		}
		proto, l4 = ip[6], ip[40:]
		if proto != 6 && proto != 17 {
			return true // an extension header, or anything else
		}
	default:
		return true
	}
	if proto != 17 {
		return false
	}
	return len(l4) < 4 || binary.BigEndian.Uint16(l4[2:]) == RoCEPort
}

// ethernetIP returns the IP packet inside an untagged Ethernet II frame.
func ethernetIP(frame []byte) ([]byte, bool) {
	if len(frame) < 14 {
		return nil, false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800, 0x86dd:
		return frame[14:], true
	}
	return nil, false
}

// Tshark runs tshark over the capture and adds to rep.Problems every RoCE
// packet from senders that tshark does not decode as InfiniBand, or marks
// malformed or with an error-level expert item. It checks that tshark saw
// as many sent packets as Check did.
func Tshark(path string, senders []netip.Addr, rep *Report) error {
	if _, err := exec.LookPath("tshark"); err != nil {
		return fmt.Errorf("pcapcheck: tshark is needed: %w", err)
	}
	var src []string
	for _, s := range senders {
		if s.Is4() {
			src = append(src, "ip.src == "+s.String())
		} else {
			src = append(src, "ipv6.src == "+s.String())
		}
	}
	// Not ICMP: an ICMP error quotes the UDP header of the packet it answers.
	sent := fmt.Sprintf("udp.dstport == %d && !icmp && !icmpv6 && (%s)", RoCEPort, strings.Join(src, " || "))
	// Pass 1: every sent packet with its opcode as tshark sees it.
	out, err := tshark(path, sent, "frame.number", "infiniband.bth.opcode")
	if err != nil {
		return err
	}
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		seen++
		f := strings.Split(l, "\t")
		if len(f) < 2 || f[1] == "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("frame %s: tshark does not decode it as InfiniBand", f[0]))
		}
	}
	if seen != rep.Sent {
		rep.Problems = append(rep.Problems, fmt.Sprintf("tshark saw %d sent RoCE packets, the checker %d", seen, rep.Sent))
	}
	// Pass 2: malformed or error-level expert items.
	out, err = tshark(path, fmt.Sprintf(`(%s) && (_ws.malformed || _ws.expert.severity >= "Error")`, sent),
		"frame.number", "_ws.expert.message")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		f := strings.SplitN(l, "\t", 2)
		msg := "malformed"
		if len(f) == 2 && f[1] != "" {
			msg = f[1]
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("frame %s: tshark: %s", f[0], msg))
	}
	return nil
}

// payloadGuessers returns tshark options that turn off the heuristic
// dissectors Wireshark tries on InfiniBand payloads (RPC-over-RDMA, SMC,
// NVMe, iSER, SDP, Ethernet over IB...). They read application bytes as
// protocol headers: an RDMA WRITE carrying perftest's bytes 00 61 "is" CRTP
// and a 2-byte SEND "is" RPC-over-RDMA, both malformed, for rxe's packets as
// for softrdma's. The payload is the application's, not part of the wire
// format under test; the InfiniBand headers are still decoded and checked.
var payloadGuessers = sync.OnceValue(func() []string {
	args := []string{"--disable-heuristic", "eth_over_ib"}
	out, _ := exec.Command("tshark", "-G", "heuristic-decodes").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "infiniband.payload" && f[1] != "ethertype" {
			args = append(args, "--disable-protocol", f[1])
		}
	}
	return args
})

func tshark(path, filter string, fields ...string) (string, error) {
	args := append([]string{"-n"}, payloadGuessers()...)
	args = append(args, "-r", path, "-Y", filter, "-T", "fields")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command("tshark", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("tshark -Y %s: %v: %s", strconv.Quote(filter), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
