// The out-of-band exchange perftest (ib_write_bw and friends) runs over TCP
// before and after a test: versions, system data, MTU, per-QP keys, the bw
// report and the closing "done". Every message has a fixed size; the client
// writes first and the server reads first, so one message from each side
// makes one exchange.

package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// Sizes of the exchange messages.
const (
	VersionSize = 16  // NUL-padded version string
	KeyMsgSize  = 108 // per-QP keys with the GID, NUL included
	mtuMsgSize  = 2   // "%d" of the MTU code, NUL-terminated (versions >= 5.31)
	doneMsg     = "done\x00"
)

// Version is the perftest version softrdma announces: the one Debian 12's
// perftest 4.5-0.20 reports. It is above 5.70 (the oldest a peer accepts)
// and below 6.28, so no binary parameter block follows the MTU exchange.
const Version = "6.06"

// ErrExchange is wrapped by every error about a malformed or truncated
// message from the peer.
var ErrExchange = errors.New("perftest exchange")

func exErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrExchange}, a...)...)
}

// Dest is what each side tells the other about one QP (pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads uint32 // outstanding RDMA READs/atomics the side accepts
	QPN      wire.QPN
	PSN      wire.PSN
	RKey     wire.RKey
	VAddr    uint64 // where the peer may write, read or do atomics
	GID      wire.GID
	SRQN     uint32
}

// Marshal formats d as perftest's keys message with GID:
// "%04x:%04x:%06x:%06x:%08x:%016llx:" then the 16 GID bytes as "%02x:",
// then "%08x:" of the SRQ number, NUL-padded to KeyMsgSize bytes.
func (d *Dest) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	for _, g := range d.GID {
		fmt.Fprintf(&b, "%02x:", g)
	}
	fmt.Fprintf(&b, "%08x:", d.SRQN)
	out := make([]byte, KeyMsgSize)
	copy(out, b.String())
	return out
}

// ParseDest parses a keys message. It needs the whole message: 23
// colon-terminated hexadecimal fields before the NUL.
func ParseDest(msg []byte) (Dest, error) {
	var d Dest
	if len(msg) < KeyMsgSize {
		return d, exErr("keys message has %d bytes, want %d", len(msg), KeyMsgSize)
	}
	msg = msg[:KeyMsgSize]
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	fields := strings.Split(string(msg), ":")
	if len(fields) != 24 || fields[23] != "" {
		return d, exErr("keys message %q: want 23 colon-terminated fields", msg)
	}
	var v [23]uint64
	bits := [23]int{16, 16, 24, 24, 32, 64} // out_reads is sent as %04x: 16 bits fill its field
	for i := range v {
		size := bits[i]
		if i >= 6 && i < 22 {
			size = 8
		} else if i == 22 {
			size = 32
		}
		n, err := strconv.ParseUint(fields[i], 16, size)
		if err != nil || fields[i] == "" {
			return d, exErr("keys message field %d %q is not a %d-bit hex number", i, fields[i], size)
		}
		v[i] = n
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint32(v[1]), wire.QPN(v[2]), wire.PSN(v[3]), wire.RKey(v[4]), v[5]
	for i := range d.GID {
		d.GID[i] = byte(v[6+i])
	}
	d.SRQN = uint32(v[22])
	return d, nil
}

// ParseVersion reads a version message as C's atof does: the leading
// decimal number, 0 if there is none.
func ParseVersion(msg []byte) float64 {
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	s := strings.TrimLeft(string(msg), " \t\n")
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		if s[end] == '.' {
			dot = true
		}
		end++
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return f
}

// ParseMTU reads the MTU message: a decimal IB MTU code (1..5) followed by
// NUL. It returns 0 for anything else, which perftest treats as "use mine".
func ParseMTU(msg []byte) int {
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	n, err := strconv.Atoi(string(msg))
	if err != nil || n < 1 || n > 5 {
		return 0
	}
	return n
}

// BWReport is the result a bw test side reports (bw_report_data).
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// bwReportSize is the report's size on the wire for peers of version >= 5.33:
// size and iterations as 64-bit, then three doubles, all big-endian.
const bwReportSize = 40

// MarshalBWReport encodes r as the five fields perftest sends one by one.
func MarshalBWReport(r BWReport) []byte {
	b := make([]byte, bwReportSize)
	binary.BigEndian.PutUint64(b[0:], r.Size)
	binary.BigEndian.PutUint64(b[8:], r.Iters)
	binary.BigEndian.PutUint64(b[16:], math.Float64bits(r.BWPeak))
	binary.BigEndian.PutUint64(b[24:], math.Float64bits(r.BWAvg))
	binary.BigEndian.PutUint64(b[32:], math.Float64bits(r.MsgRate))
	return b
}

// ParseBWReport decodes a report sent by MarshalBWReport.
func ParseBWReport(b []byte) (BWReport, error) {
	if len(b) < bwReportSize {
		return BWReport{}, exErr("bw report has %d bytes, want %d", len(b), bwReportSize)
	}
	r := BWReport{
		Size:    binary.BigEndian.Uint64(b[0:]),
		Iters:   binary.BigEndian.Uint64(b[8:]),
		BWPeak:  math.Float64frombits(binary.BigEndian.Uint64(b[16:])),
		BWAvg:   math.Float64frombits(binary.BigEndian.Uint64(b[24:])),
		MsgRate: math.Float64frombits(binary.BigEndian.Uint64(b[32:])),
	}
	for _, f := range []float64{r.BWPeak, r.BWAvg, r.MsgRate} {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return BWReport{}, exErr("bw report has a bad number %v", f)
		}
	}
	return r, nil
}

// Conn is the connection of the exchange: TCP, or in rdma_cm mode (-R)
// an RC QP connected with rdma_cm.
type Conn struct {
	c      net.Conn // TCP; nil in rdma_cm mode
	m      *cmChannel
	client bool
	// RemoteVersion is the peer's version once ExchangeVersions ran.
	RemoteVersion float64
	stop          func() bool
}

// Dial connects to a perftest server.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
	}
	return newConn(ctx, c, true), nil
}

// Listen opens the server's listening socket (on every address, as
// perftest's server does).
func Listen(port int) (net.Listener, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	return l, nil
}

// Accept waits for one client on l.
func Accept(ctx context.Context, l net.Listener) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("accept: %w", err)
	}
	return newConn(ctx, c, false), nil
}

func newConn(ctx context.Context, c net.Conn, client bool) *Conn {
	x := &Conn{c: c, client: client}
	x.stop = context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return x
}

// Close closes the connection.
func (x *Conn) Close() error {
	if x.m != nil {
		return x.m.close()
	}
	x.stop()
	return x.c.Close()
}

// Exchange sends mine and receives the peer's message of n bytes, in the
// order of the side: the client writes first, the server reads first.
func (x *Conn) Exchange(mine []byte, n int, what string) ([]byte, error) {
	if x.m != nil {
		return x.m.exchange(mine, n, what, x.client)
	}
	buf := make([]byte, n)
	write := func() error {
		if _, err := x.c.Write(mine); err != nil {
			return fmt.Errorf("sending %s: %w", what, err)
		}
		return nil
	}
	read := func() error {
		if _, err := io.ReadFull(x.c, buf); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return exErr("peer closed the connection while sending %s", what)
			}
			return fmt.Errorf("receiving %s: %w", what, err)
		}
		return nil
	}
	if x.client {
		if err := write(); err != nil {
			return nil, err
		}
		return buf, read()
	}
	if err := read(); err != nil {
		return nil, err
	}
	return buf, write()
}

// ExchangeVersions swaps version strings and checks the peer's.
func (x *Conn) ExchangeVersions() error {
	mine := make([]byte, VersionSize)
	copy(mine, Version)
	rem, err := x.Exchange(mine, VersionSize, "version")
	if err != nil {
		return err
	}
	x.RemoteVersion = ParseVersion(rem)
	if x.RemoteVersion < 5.70 {
		return exErr("peer's version %q is older than 5.70, which this exchange needs", bytes.TrimRight(rem, "\x00"))
	}
	return nil
}

// ExchangeSysData swaps the cycle-buffer (page) and cache-line sizes and
// returns the larger of each, as both sides then use.
func (x *Conn) ExchangeSysData(cycleBuffer, cacheLine int) (int, int, error) {
	// Two messages, as perftest sends them: it reads each with one read()
	// and answers before reading the next.
	var rem [2]uint32
	for i, v := range []int{cycleBuffer, cacheLine} {
		mine := make([]byte, 4)
		binary.BigEndian.PutUint32(mine, uint32(v))
		b, err := x.Exchange(mine, 4, []string{"buffer size", "cache-line size"}[i])
		if err != nil {
			return 0, 0, err
		}
		rem[i] = binary.BigEndian.Uint32(b)
	}
	rc, rl := int32(rem[0]), int32(rem[1])
	if rc < 0 || rc > 1<<30 || rl < 0 || rl > 1<<20 {
		return 0, 0, exErr("peer's buffer size %d or cache-line size %d is out of range", rc, rl)
	}
	return max(cycleBuffer, int(rc)), max(cacheLine, int(rl)), nil
}

// ExchangeMTU swaps MTU codes and returns the smaller valid one.
func (x *Conn) ExchangeMTU(mtu int) (int, error) {
	mine := make([]byte, mtuMsgSize)
	copy(mine, strconv.Itoa(mtu))
	rem, err := x.Exchange(mine, mtuMsgSize, "MTU")
	if err != nil {
		return 0, err
	}
	if r := ParseMTU(rem); r != 0 && r < mtu {
		return r, nil
	}
	return mtu, nil
}

// ExchangeDest swaps one QP's keys.
func (x *Conn) ExchangeDest(d *Dest) (Dest, error) {
	if x.m != nil {
		rem, err := x.Exchange(d.MarshalCM(x.m.gidIndex), CMDestSize, "QP keys")
		if err != nil {
			return Dest{}, err
		}
		return ParseCMDest(rem)
	}
	rem, err := x.Exchange(d.Marshal(), KeyMsgSize, "QP keys")
	if err != nil {
		return Dest{}, err
	}
	return ParseDest(rem)
}

// Sync is a keys exchange used only to wait for the peer.
func (x *Conn) Sync(d *Dest) error {
	_, err := x.ExchangeDest(d)
	return err
}

// ExchangeBWReport swaps bw reports, one field per exchange as perftest
// does (it answers each before reading the next).
func (x *Conn) ExchangeBWReport(r BWReport) (BWReport, error) {
	mine := MarshalBWReport(r)
	rem := make([]byte, 0, bwReportSize)
	for off := 0; off < bwReportSize; off += 8 {
		b, err := x.Exchange(mine[off:off+8], 8, "bw report")
		if err != nil {
			return BWReport{}, err
		}
		rem = append(rem, b...)
	}
	return ParseBWReport(rem)
}

// Finish is perftest's ctx_close_connection: one more keys exchange, then
// "done" and close. The peer's "done" is drained for a moment so that
// closing does not reset the connection under it.
func (x *Conn) Finish(d *Dest) error {
	if x.m != nil {
		return x.m.finish(func() error { return x.Sync(d) }, x.client)
	}
	if err := x.Sync(d); err != nil {
		return err
	}
	if _, err := x.c.Write([]byte(doneMsg)); err != nil {
		return fmt.Errorf("sending done: %w", err)
	}
	x.c.SetReadDeadline(time.Now().Add(time.Second))
	var b [len(doneMsg)]byte
	io.ReadFull(x.c, b[:])
	return nil
}

// CMDestSize is the size of a keys message in rdma_cm mode (-R): perftest
// sends its struct pingpong_dest as it lies in memory on a 64-bit host, with
// the integers converted to big-endian.
const CMDestSize = 56

// Offsets in the binary keys message: six 32-bit fields (lid, out_reads,
// qpn, psn, rkey, then 4 bytes of alignment padding), the 64-bit vaddr, the
// GID, and two 32-bit fields (srqn and gid_index) that perftest's reader
// ignores.
const (
	cmOffLID      = 0
	cmOffOutReads = 4
	cmOffQPN      = 8
	cmOffPSN      = 12
	cmOffRKey     = 16
	cmOffVAddr    = 24
	cmOffGID      = 32
	cmOffSRQN     = 48
	cmOffGIDIndex = 52
)

// MarshalCM formats d as perftest's binary keys message of rdma_cm mode.
// gidIndex goes into the field perftest fills with its GID index.
func (d *Dest) MarshalCM(gidIndex int) []byte {
	b := make([]byte, CMDestSize)
	be := binary.BigEndian
	be.PutUint32(b[cmOffLID:], uint32(d.LID))
	be.PutUint32(b[cmOffOutReads:], d.OutReads)
	be.PutUint32(b[cmOffQPN:], uint32(d.QPN))
	be.PutUint32(b[cmOffPSN:], uint32(d.PSN))
	be.PutUint32(b[cmOffRKey:], uint32(d.RKey))
	be.PutUint64(b[cmOffVAddr:], d.VAddr)
	copy(b[cmOffGID:], d.GID[:])
	be.PutUint32(b[cmOffSRQN:], d.SRQN)
	be.PutUint32(b[cmOffGIDIndex:], uint32(int32(gidIndex)))
	return b
}

// ParseCMDest parses a binary keys message of rdma_cm mode. It needs all
// CMDestSize bytes; the LID must fit in 16 bits and the QPN and PSN in 24,
// as in any message perftest sends.
func ParseCMDest(msg []byte) (Dest, error) {
	var d Dest
	if len(msg) < CMDestSize {
		return d, exErr("rdma_cm keys message has %d bytes, want %d", len(msg), CMDestSize)
	}
	be := binary.BigEndian
	lid := be.Uint32(msg[cmOffLID:])
	d.OutReads = be.Uint32(msg[cmOffOutReads:])
	d.QPN = wire.QPN(be.Uint32(msg[cmOffQPN:]))
	d.PSN = wire.PSN(be.Uint32(msg[cmOffPSN:]))
	d.RKey = wire.RKey(be.Uint32(msg[cmOffRKey:]))
	d.VAddr = be.Uint64(msg[cmOffVAddr:])
	copy(d.GID[:], msg[cmOffGID:cmOffGID+16])
	d.SRQN = be.Uint32(msg[cmOffSRQN:])
	if lid > 0xffff || d.QPN > 0xffffff || d.PSN > 0xffffff {
		return Dest{}, exErr("rdma_cm keys message has LID %#x, QPN %#x, PSN %#x: out of range", lid, d.QPN, d.PSN)
	}
	d.LID = uint16(lid)
	return d, nil
}
