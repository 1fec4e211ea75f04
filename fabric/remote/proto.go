// The wire protocol between a remote HCA port (client) and the fabric's
// server: frames on a reliable byte stream (TCP or a unix socket).
//
// A frame is a 4-byte big-endian length n (1 <= n <= maxFrameLen), then n
// bytes: a 1-byte type and the type's body.
//
//	attach    client -> server  magic "SRIB", version, port number, node (name or GUID, length-prefixed)
//	attached  server -> client  the port's attributes (as attr)
//	refused   server -> client  a reason code and a message; the server closes
//	attr      server -> client  the port's attributes after a change
//	packet    both ways         one whole IB packet, LRH through VCRC
//	keepalive both ways         nothing: sent every KeepAlive by each side
//	detach    client -> server  the client closes its port on purpose
//	credit    server -> client  per data VL, packets the client may send more (VL, count) pairs
//
// Packets on the data VLs (0..14) are flow controlled per VL, as on an IB
// link: the server grants each VL laneCredits packets right after the
// attached frame and returns a credit for each packet it has handed to
// the fabric; a client sends a data-VL packet only with a credit for its
// VL. VL15 bypasses credits. So the server's reader never waits for one
// VL, and a VL the fabric holds back stops only that VL at the client.

package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/softrdma/softrdma/link/ib"
)

// Frame types.
const (
	frameAttach    = 1
	frameAttached  = 2
	frameRefused   = 3
	frameAttr      = 4
	framePacket    = 5
	frameKeepAlive = 6
	frameDetach    = 7
	frameCredit    = 8
)

const (
	protoMagic = "SRIB"
	// protoVersion 2 added per-VL credits (version 1 had none: one VL
	// waiting stopped the stream).
	protoVersion = 2
	// maxNodeName bounds the node name an attach frame carries (a
	// topology's node names are short; ibnetdiscover's descriptions are
	// at most 64 bytes).
	maxNodeName = 255
	// attachFixedLen is an attach body without the node name: magic,
	// version, port, name length.
	attachFixedLen = len(protoMagic) + 3
	// maxPacket is the largest IB packet a frame carries.
	maxPacket = ib.MaxFrame
	// maxFrameLen is the largest frame length (type byte and body).
	maxFrameLen = 1 + maxPacket
	// attrFixedLen is the encoded PortAttr without its P_Key table.
	attrFixedLen = 46
	// maxPKeys bounds the P_Key table an attr frame carries.
	maxPKeys = (maxFrameLen - 1 - attrFixedLen) / 2
)

// Flow control of the data VLs.
const (
	// dataVLs is the number of data VLs a stream carries (VL0-VL14).
	dataVLs = 15
	// laneCredits is how many packets of one data VL the server holds
	// between its reader and the fabric: the credits a client starts
	// with on each data VL.
	laneCredits = 64
	// creditReturn is how many credits of a VL the server collects
	// before it sends them back on their own; a frame it sends anyway
	// carries whatever is collected.
	creditReturn = laneCredits / 4
	// creditEntryLen is one (VL, count) pair of a credit frame.
	creditEntryLen = 3
)

// Refusal codes of a refused frame.
const (
	refuseBadRequest = 1 // not an attach frame, bad magic or version
	refuseNoNode     = 2
	refuseNoPort     = 3
	refuseInUse      = 4
	refuseClosed     = 5 // the server or its fabric is closing
	refuseOther      = 6
)

// Errors of the protocol codec.
var (
	// ErrTruncated means a frame body is shorter than its type needs.
	ErrTruncated = errors.New("remote: truncated frame")
	// ErrBadFrame means a frame is malformed (length out of range, unknown
	// type, bad magic, a field out of range).
	ErrBadFrame = errors.New("remote: malformed frame")
)

// appendFrame appends a frame of type typ with body b to dst.
func appendFrame(dst []byte, typ byte, b []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+len(b)))
	dst = append(dst, typ)
	return append(dst, b...)
}

// readFrame reads one frame into buf (grown if needed) and returns its
// type and body (aliasing buf). A length out of range is an error wrapping
// ErrBadFrame: the stream cannot be resynchronised after it.
func readFrame(r io.Reader, buf []byte) (typ byte, body, newBuf []byte, err error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, buf, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n < 1 || n > maxFrameLen {
		return 0, nil, buf, fmt.Errorf("%w: length %d (1..%d)", ErrBadFrame, n, maxFrameLen)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n, maxFrameLen)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, buf, err
	}
	return buf[0], buf[1:], buf, nil
}

// attachReq is the body of an attach frame.
type attachReq struct {
	Node string // a topology node name, or a node or port GUID
	Port int
}

func (a attachReq) encode() ([]byte, error) {
	if a.Node == "" || len(a.Node) > maxNodeName {
		return nil, fmt.Errorf("%w: node name of %d bytes (1..%d)", ErrBadFrame, len(a.Node), maxNodeName)
	}
	if a.Port < 1 || a.Port > 254 {
		return nil, fmt.Errorf("%w: port %d (1..254)", ErrBadFrame, a.Port)
	}
	b := append([]byte(protoMagic), protoVersion, byte(a.Port), byte(len(a.Node)))
	return append(b, a.Node...), nil
}

func parseAttach(b []byte) (attachReq, error) {
	if len(b) < attachFixedLen {
		return attachReq{}, fmt.Errorf("%w: attach of %d bytes", ErrTruncated, len(b))
	}
	if string(b[:4]) != protoMagic {
		return attachReq{}, fmt.Errorf("%w: bad magic %q", ErrBadFrame, b[:4])
	}
	if b[4] != protoVersion {
		return attachReq{}, fmt.Errorf("%w: version %d, want %d", ErrBadFrame, b[4], protoVersion)
	}
	n := int(b[6])
	if len(b) < attachFixedLen+n {
		return attachReq{}, fmt.Errorf("%w: node name of %d bytes in %d", ErrTruncated, n, len(b)-attachFixedLen)
	}
	name := b[attachFixedLen:]
	if n == 0 || len(name) > n || b[5] == 0 || b[5] == 255 {
		return attachReq{}, fmt.Errorf("%w: node name of %d bytes (%d after the header), port %d", ErrBadFrame, n, len(name), b[5])
	}
	return attachReq{Node: string(name), Port: int(b[5])}, nil
}

// appendAttr appends the encoding of a (attached and attr frames).
func appendAttr(dst []byte, a *ib.PortAttr) []byte {
	be := binary.BigEndian
	dst = be.AppendUint16(dst, a.LID)
	dst = be.AppendUint16(dst, a.SMLID)
	dst = append(dst, a.LMC, a.SMSL, a.State, a.PhysState)
	dst = be.AppendUint16(dst, uint16(a.MTU))
	dst = append(dst, byte(a.OperVLs), 0)
	dst = be.AppendUint64(dst, a.GIDPrefix)
	dst = be.AppendUint64(dst, a.PortGUID)
	dst = append(dst, a.SL2VL[:]...)
	pk := a.PKeys[:min(len(a.PKeys), maxPKeys)]
	dst = be.AppendUint16(dst, uint16(len(pk)))
	for _, k := range pk {
		dst = be.AppendUint16(dst, k)
	}
	return dst
}

// parseAttr decodes an attr body.
func parseAttr(b []byte) (ib.PortAttr, error) {
	var a ib.PortAttr
	if len(b) < attrFixedLen {
		return a, fmt.Errorf("%w: attributes of %d bytes, want %d or more", ErrTruncated, len(b), attrFixedLen)
	}
	be := binary.BigEndian
	a.LID, a.SMLID = be.Uint16(b[0:]), be.Uint16(b[2:])
	a.LMC, a.SMSL, a.State, a.PhysState = b[4], b[5], b[6], b[7]
	a.MTU = int(be.Uint16(b[8:]))
	a.OperVLs = int(b[10])
	a.GIDPrefix, a.PortGUID = be.Uint64(b[12:]), be.Uint64(b[20:])
	copy(a.SL2VL[:], b[28:44])
	n := int(be.Uint16(b[44:]))
	if len(b) < attrFixedLen+2*n {
		return ib.PortAttr{}, fmt.Errorf("%w: %d P_Keys in %d bytes", ErrTruncated, n, len(b)-attrFixedLen)
	}
	if len(b) > attrFixedLen+2*n {
		return ib.PortAttr{}, fmt.Errorf("%w: %d bytes after the P_Key table", ErrBadFrame, len(b)-attrFixedLen-2*n)
	}
	if a.LMC > 7 || a.State > ib.StateActive {
		return ib.PortAttr{}, fmt.Errorf("%w: LMC %d, state %d", ErrBadFrame, a.LMC, a.State)
	}
	a.PKeys = make([]uint16, n)
	for i := range a.PKeys {
		a.PKeys[i] = be.Uint16(b[attrFixedLen+2*i:])
	}
	return a, nil
}

// refusal is the body of a refused frame.
type refusal struct {
	Code byte
	Msg  string
}

func (r refusal) encode() []byte {
	m := r.Msg
	if len(m) > 1024 {
		m = m[:1024]
	}
	return append([]byte{r.Code}, m...)
}

func parseRefusal(b []byte) (refusal, error) {
	if len(b) < 1 {
		return refusal{}, fmt.Errorf("%w: empty refusal", ErrTruncated)
	}
	if b[0] < refuseBadRequest || b[0] > refuseOther {
		return refusal{}, fmt.Errorf("%w: refusal code %d", ErrBadFrame, b[0])
	}
	return refusal{Code: b[0], Msg: string(b[1:])}, nil
}

// appendCredits appends a credit body: a (VL, count) pair for each data
// VL with a nonzero count in c.
func appendCredits(dst []byte, c *[dataVLs]uint16) []byte {
	for v, n := range c {
		if n != 0 {
			dst = append(dst, byte(v), byte(n>>8), byte(n))
		}
	}
	return dst
}

// parseCredits decodes a credit body: pairs of a data VL and a nonzero
// count, each VL at most once.
func parseCredits(b []byte) (c [dataVLs]uint16, err error) {
	if len(b) == 0 || len(b)%creditEntryLen != 0 {
		return c, fmt.Errorf("%w: credits of %d bytes", ErrBadFrame, len(b))
	}
	for ; len(b) > 0; b = b[creditEntryLen:] {
		v, n := b[0], binary.BigEndian.Uint16(b[1:])
		if v >= dataVLs || n == 0 || c[v] != 0 {
			return [dataVLs]uint16{}, fmt.Errorf("%w: %d credits for VL %d", ErrBadFrame, n, v)
		}
		c[v] = n
	}
	return c, nil
}

// packetVL returns the VL of a packet frame's body (its LRH's first
// nibble).
func packetVL(b []byte) uint8 { return b[0] >> 4 }

// checkPacket checks a packet frame's body: the smallest IB packet is an
// LRH and a VCRC.
func checkPacket(b []byte) error {
	if len(b) < 10 {
		return fmt.Errorf("%w: packet of %d bytes", ErrTruncated, len(b))
	}
	return nil
}
