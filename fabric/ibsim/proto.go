// The messages of ibsim's client protocol, as include/ibsim.h lays them out
// on an x86-64 or arm64 Linux host. The control messages carry their
// integers in the host's byte order (both ends share a host, or at least an
// architecture); the MAD requests carry LIDs, QPNs, the status and the
// length in network order, and the LIDs sit in 32-bit fields in the way
// umad2sim stores them: a big-endian 16-bit value in a host-order uint32.

package ibsim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

var (
	be   = binary.BigEndian
	host = binary.NativeEndian
)

// Protocol constants.
const (
	Magic          = 0xdeadbeef // Ctl.Magic of every control message
	MaxClients     = 10         // client slots of a server
	DefaultPort    = 7070       // UDP control port of a server in inet mode
	DefaultBase    = "sim"      // base of the abstract unix socket names
	CtlSize        = 80         // a control message: 16-byte header, 64 bytes of data
	CtlDataSize    = 64         // Ctl.Data
	RequestSize    = 288        // a MAD request: 32-byte header, 256-byte MAD
	RequestHdrSize = 32         // a Request's header
	MADSize        = 256        // Request.MAD
	ClientInfoSize = 44         // ClientInfo in Ctl.Data
	NodeIDSize     = 32         // ClientInfo's node name, NUL-terminated
	VendorSize     = 24         // Vendor in Ctl.Data
	PortStateSize  = 4          // PortState in Ctl.Data
	// StatusTimeout is the Request.Status ibsim returns with a request it
	// could not deliver (ETIMEDOUT): umad2sim reports it as the MAD's status.
	StatusTimeout = 110
)

// CtlType is the type of a control message (SIM_CTL_*).
type CtlType uint32

// Control message types. A reply carries the request's type, or CtlError
// when the server refused the request.
const (
	CtlError       CtlType = iota // reply type of a refused request
	CtlConnect                    // data: ClientInfo, in and out
	CtlDisconnect                 // no data
	CtlGetPort                    // reply: PortState
	CtlGetVendor                  // reply: Vendor
	CtlGetGID                     // reply: GID prefix (network order), node GUID (host order)
	CtlGetGUID                    // reply: node GUID (host order)
	CtlGetNodeInfo                // reply: NodeInfo attribute (64 bytes)
	CtlGetPortInfo                // data[0]: port number (0: the client's); reply: PortInfo
	CtlSetIsSM                    // data: int32 (host order), nonzero sets IsSM
	CtlGetPKeys                   // reply: the port's P_Keys (network order), zero-filled
)

var ctlNames = [...]string{"ERROR", "CONNECT", "DISCONNECT", "GET_PORT", "GET_VENDOR",
	"GET_GID", "GET_GUID", "GET_NODEINFO", "GET_PORTINFO", "SET_ISSM", "GET_PKEYS"}

// String returns the type's name as ibsim.h spells it without SIM_CTL_.
func (t CtlType) String() string {
	if int(t) < len(ctlNames) {
		return ctlNames[t]
	}
	return fmt.Sprintf("CtlType(%d)", uint32(t))
}

// Errors of the codec; test with errors.Is.
var (
	// ErrTruncated means a message is shorter than its type.
	ErrTruncated = errors.New("ibsim: truncated message")
	// ErrTooLong means a message is longer than its type.
	ErrTooLong = errors.New("ibsim: message too long")
	// ErrBadMagic means a control message lacks Magic.
	ErrBadMagic = errors.New("ibsim: bad magic")
)

func checkSize(b []byte, size int, what string) error {
	if len(b) < size {
		return fmt.Errorf("%w: %s of %d bytes, want %d", ErrTruncated, what, len(b), size)
	}
	if len(b) > size {
		return fmt.Errorf("%w: %s of %d bytes, want %d", ErrTooLong, what, len(b), size)
	}
	return nil
}

// Ctl is a control message (struct sim_ctl), sent by a client to the
// server's control socket and returned by the server as the reply.
type Ctl struct {
	Magic    uint32 // Magic
	ClientID uint32 // the client's slot (ignored by CONNECT)
	Type     CtlType
	Len      uint32 // bytes of Data the client uses
	Data     [CtlDataSize]byte
}

// ParseCtl decodes a control message of exactly CtlSize bytes.
func ParseCtl(b []byte) (Ctl, error) {
	var c Ctl
	if err := checkSize(b, CtlSize, "control message"); err != nil {
		return c, err
	}
	c.Magic = host.Uint32(b[0:])
	c.ClientID = host.Uint32(b[4:])
	c.Type = CtlType(host.Uint32(b[8:]))
	c.Len = host.Uint32(b[12:])
	copy(c.Data[:], b[16:])
	if c.Magic != Magic {
		return c, fmt.Errorf("%w: 0x%08x", ErrBadMagic, c.Magic)
	}
	return c, nil
}

// Encode writes the message into b, which must hold CtlSize bytes.
func (c *Ctl) Encode(b []byte) {
	_ = b[CtlSize-1]
	host.PutUint32(b[0:], c.Magic)
	host.PutUint32(b[4:], c.ClientID)
	host.PutUint32(b[8:], uint32(c.Type))
	host.PutUint32(b[12:], c.Len)
	copy(b[16:CtlSize], c.Data[:])
}

// Append appends the encoded message to b.
func (c *Ctl) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, CtlSize)...)
	c.Encode(b[n:])
	return b
}

// ClientInfo is the data of a CONNECT (struct sim_client_info). The client
// sends its id (its pid in unix mode, the UDP port of its input socket in
// inet mode), the QP it serves, whether it is an SM and the node it wants
// (SIM_HOST, empty for the default); the server returns the slot in ID and
// the node's name in NodeID.
type ClientInfo struct {
	ID     uint32
	QP     uint32
	IsSM   uint32
	NodeID string // at most NodeIDSize-1 bytes
}

// ParseClientInfo decodes a ClientInfo from the start of a Ctl's data.
func ParseClientInfo(b []byte) (ClientInfo, error) {
	var ci ClientInfo
	if len(b) < ClientInfoSize {
		return ci, fmt.Errorf("%w: client info of %d bytes, want %d", ErrTruncated, len(b), ClientInfoSize)
	}
	ci.ID = host.Uint32(b[0:])
	ci.QP = host.Uint32(b[4:])
	ci.IsSM = host.Uint32(b[8:])
	ci.NodeID = cString(b[12:ClientInfoSize])
	return ci, nil
}

// Encode writes the info into b (at least ClientInfoSize bytes). A NodeID
// longer than NodeIDSize-1 bytes is cut, as ibsim's strncpy cuts it.
func (ci *ClientInfo) Encode(b []byte) {
	_ = b[ClientInfoSize-1]
	host.PutUint32(b[0:], ci.ID)
	host.PutUint32(b[4:], ci.QP)
	host.PutUint32(b[8:], ci.IsSM)
	name := b[12:ClientInfoSize]
	clear(name)
	copy(name[:NodeIDSize-1], ci.NodeID)
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Vendor is the reply data of GET_VENDOR (struct sim_vendor).
type Vendor struct {
	VendorID     uint32
	VendorPartID uint32 // NodeInfo's DeviceID
	HWVersion    uint32 // NodeInfo's Revision
	FWVersion    uint64 // ibsim always answers 1
}

// ParseVendor decodes a Vendor from the start of a Ctl's data.
func ParseVendor(b []byte) (Vendor, error) {
	var v Vendor
	if len(b) < VendorSize {
		return v, fmt.Errorf("%w: vendor of %d bytes, want %d", ErrTruncated, len(b), VendorSize)
	}
	v.VendorID = host.Uint32(b[0:])
	v.VendorPartID = host.Uint32(b[4:])
	v.HWVersion = host.Uint32(b[8:])
	v.FWVersion = host.Uint64(b[16:])
	return v, nil
}

// Encode writes v into b (at least VendorSize bytes).
func (v *Vendor) Encode(b []byte) {
	_ = b[VendorSize-1]
	host.PutUint32(b[0:], v.VendorID)
	host.PutUint32(b[4:], v.VendorPartID)
	host.PutUint32(b[8:], v.HWVersion)
	clear(b[12:16])
	host.PutUint64(b[16:], v.FWVersion)
}

// PortState is the reply data of GET_PORT (struct sim_port).
type PortState struct {
	LID   uint16
	State uint8 // PortInfo's PortState: 1 Down ... 4 Active
}

// ParsePortState decodes a PortState from the start of a Ctl's data.
func ParsePortState(b []byte) (PortState, error) {
	if len(b) < PortStateSize {
		return PortState{}, fmt.Errorf("%w: port of %d bytes, want %d", ErrTruncated, len(b), PortStateSize)
	}
	return PortState{LID: host.Uint16(b[0:]), State: b[2]}, nil
}

// Encode writes p into b (at least PortStateSize bytes).
func (p *PortState) Encode(b []byte) {
	_ = b[PortStateSize-1]
	host.PutUint16(b[0:], p.LID)
	b[2] = p.State
	b[3] = 0
}

// Request is a MAD with its addressing (struct sim_request), the datagram
// of a client's data socket in both directions.
type Request struct {
	DLID, SLID uint16 // 0xFFFF (permissive) for directed-route SMPs
	DQP, SQP   uint32
	Status     uint32 // 0, or StatusTimeout for a request that went nowhere
	Length     uint64 // bytes of MAD the sender filled (256)
	MAD        [MADSize]byte
}

// lid16 reads a LID as umad2sim stores it: a network-order 16-bit value
// assigned to a host-order uint32.
func lid16(b []byte) uint16 {
	var x [2]byte
	host.PutUint16(x[:], uint16(host.Uint32(b)))
	return be.Uint16(x[:])
}

func putLID16(b []byte, lid uint16) {
	var x [2]byte
	be.PutUint16(x[:], lid)
	host.PutUint32(b, uint32(host.Uint16(x[:])))
}

// ParseRequest decodes a Request of exactly RequestSize bytes. The four
// padding bytes after Status are ignored (umad2sim leaves them unset).
func ParseRequest(b []byte) (Request, error) {
	var r Request
	if err := checkSize(b, RequestSize, "MAD request"); err != nil {
		return r, err
	}
	r.DLID = lid16(b[0:])
	r.SLID = lid16(b[4:])
	r.DQP = be.Uint32(b[8:])
	r.SQP = be.Uint32(b[12:])
	r.Status = be.Uint32(b[16:])
	r.Length = be.Uint64(b[24:])
	copy(r.MAD[:], b[RequestHdrSize:])
	return r, nil
}

// Encode writes r into b, which must hold RequestSize bytes.
func (r *Request) Encode(b []byte) {
	_ = b[RequestSize-1]
	putLID16(b[0:], r.DLID)
	putLID16(b[4:], r.SLID)
	be.PutUint32(b[8:], r.DQP)
	be.PutUint32(b[12:], r.SQP)
	be.PutUint32(b[16:], r.Status)
	clear(b[20:24])
	be.PutUint64(b[24:], r.Length)
	copy(b[RequestHdrSize:RequestSize], r.MAD[:])
}

// Append appends the encoded request to b.
func (r *Request) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, RequestSize)...)
	r.Encode(b[n:])
	return b
}

// Fields of the MAD header the server reads and rewrites.
const (
	madMgmtClass = 1
	madMethod    = 3
	madTID       = 8
	madAttrID    = 16
	madAttrMod   = 20

	classDirected = 0x81
	responseBit   = 0x80
)

// IsResponse reports whether the MAD's method has the response bit set.
func (r *Request) IsResponse() bool { return r.MAD[madMethod]&responseBit != 0 }

// TID returns the MAD's transaction ID.
func (r *Request) TID() uint64 { return be.Uint64(r.MAD[madTID:]) }

// SetTID sets the MAD's transaction ID.
func (r *Request) SetTID(tid uint64) { be.PutUint64(r.MAD[madTID:], tid) }
