// The opcode table: for each BTH opcode, its transport, its place in a
// message, the extension headers it carries and whether it has payload. Parse,
// Build and the engine's dispatch are all driven by this one table.

package wire

import "fmt"

// Opcode is the BTH opcode: three bits of transport and five of operation.
type Opcode uint8

// Transport bases (high three bits of an opcode).
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
	TransportXRC Opcode = 0xA0
)

// Operation codes (low five bits), combined with a transport base.
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastImm        Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyImm        Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastImm       Opcode = 0x09
	OpWriteOnly          Opcode = 0x0A
	OpWriteOnlyImm       Opcode = 0x0B
	OpReadRequest        Opcode = 0x0C
	OpReadResponseFirst  Opcode = 0x0D
	OpReadResponseMiddle Opcode = 0x0E
	OpReadResponseLast   Opcode = 0x0F
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpAtomicAcknowledge  Opcode = 0x12
	OpCompareSwap        Opcode = 0x13
	OpFetchAdd           Opcode = 0x14
	OpSendLastInv        Opcode = 0x16
	OpSendOnlyInv        Opcode = 0x17
	OpFlush              Opcode = 0x1C
	OpAtomicWrite        Opcode = 0x1D
)

// Full opcodes of the reliable connected transport.
const (
	RCSendFirst          = TransportRC | OpSendFirst
	RCSendMiddle         = TransportRC | OpSendMiddle
	RCSendLast           = TransportRC | OpSendLast
	RCSendLastImm        = TransportRC | OpSendLastImm
	RCSendOnly           = TransportRC | OpSendOnly
	RCSendOnlyImm        = TransportRC | OpSendOnlyImm
	RCWriteFirst         = TransportRC | OpWriteFirst
	RCWriteMiddle        = TransportRC | OpWriteMiddle
	RCWriteLast          = TransportRC | OpWriteLast
	RCWriteLastImm       = TransportRC | OpWriteLastImm
	RCWriteOnly          = TransportRC | OpWriteOnly
	RCWriteOnlyImm       = TransportRC | OpWriteOnlyImm
	RCReadRequest        = TransportRC | OpReadRequest
	RCReadResponseFirst  = TransportRC | OpReadResponseFirst
	RCReadResponseMiddle = TransportRC | OpReadResponseMiddle
	RCReadResponseLast   = TransportRC | OpReadResponseLast
	RCReadResponseOnly   = TransportRC | OpReadResponseOnly
	RCAcknowledge        = TransportRC | OpAcknowledge
	RCAtomicAcknowledge  = TransportRC | OpAtomicAcknowledge
	RCCompareSwap        = TransportRC | OpCompareSwap
	RCFetchAdd           = TransportRC | OpFetchAdd
	RCSendLastInv        = TransportRC | OpSendLastInv
	RCSendOnlyInv        = TransportRC | OpSendOnlyInv
	RCFlush              = TransportRC | OpFlush
	RCAtomicWrite        = TransportRC | OpAtomicWrite

	UCSendFirst    = TransportUC | OpSendFirst
	UCSendMiddle   = TransportUC | OpSendMiddle
	UCSendLast     = TransportUC | OpSendLast
	UCSendLastImm  = TransportUC | OpSendLastImm
	UCSendOnly     = TransportUC | OpSendOnly
	UCSendOnlyImm  = TransportUC | OpSendOnlyImm
	UCWriteFirst   = TransportUC | OpWriteFirst
	UCWriteMiddle  = TransportUC | OpWriteMiddle
	UCWriteLast    = TransportUC | OpWriteLast
	UCWriteLastImm = TransportUC | OpWriteLastImm
	UCWriteOnly    = TransportUC | OpWriteOnly
	UCWriteOnlyImm = TransportUC | OpWriteOnlyImm

	UDSendOnly    = TransportUD | OpSendOnly
	UDSendOnlyImm = TransportUD | OpSendOnlyImm

	// CNP is the RoCEv2 congestion notification packet.
	CNP Opcode = 0x81
)

// Header is a bit set of the headers (and payload) an opcode carries.
type Header uint16

// Header bits.
const (
	HdrRETH Header = 1 << iota
	HdrAETH
	HdrDETH
	HdrImmDt
	HdrIETH
	HdrAtomicETH
	HdrAtomicAckETH
	HdrFETH
	HdrCNPPad // 16 reserved bytes of a CNP
	HdrPayload
)

// Flags classifies an opcode.
type Flags uint16

// Opcode flags.
const (
	FlagRequest     Flags = 1 << iota // sent by a requester
	FlagResponse                      // ACK, read response or atomic ACK
	FlagFirst                         // first packet of a multi-packet message
	FlagMiddle                        // middle packet
	FlagLast                          // last packet
	FlagSend                          // SEND family (consumes a receive WQE)
	FlagWrite                         // RDMA WRITE family
	FlagRead                          // RDMA READ request
	FlagAtomic                        // compare-swap or fetch-add
	FlagImm                           // carries immediate data
	FlagInv                           // carries an R_Key to invalidate
	FlagComplete                      // ends a message (LAST or ONLY)
	FlagStart                         // starts a message (FIRST or ONLY)
	FlagFlush                         // FLUSH
	FlagAtomicWrite                   // ATOMIC WRITE
)

// Sizes of the fixed headers in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	DETHLen         = 8
	ImmDtLen        = 4
	IETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	FETHLen         = 4
	CNPPadLen       = 16
	ICRCLen         = 4
)

// headerOrder is the order in which extension headers follow the BTH.
var headerOrder = [...]struct {
	h Header
	n int
}{
	{HdrDETH, DETHLen},
	{HdrFETH, FETHLen},
	{HdrRETH, RETHLen},
	{HdrAtomicETH, AtomicETHLen},
	{HdrAETH, AETHLen},
	{HdrAtomicAckETH, AtomicAckETHLen},
	{HdrImmDt, ImmDtLen},
	{HdrIETH, IETHLen},
	{HdrCNPPad, CNPPadLen},
}

// OpInfo describes one opcode.
type OpInfo struct {
	Name    string // IBTA-style name, e.g. "RC SEND_FIRST"
	Flags   Flags
	Headers Header // extension headers and payload presence
	HdrLen  int    // BTH plus extension headers, in bytes
	// Offsets of each extension header from the start of the BTH; -1 if absent.
	offRETH, offAETH, offDETH, offImm, offIETH, offAtomic, offAtomicAck, offFETH int8
	// FixedPayload is the exact payload length an opcode requires, or -1.
	FixedPayload int
	valid        bool
}

// Has reports whether the opcode carries header h.
func (i *OpInfo) Has(h Header) bool { return i.Headers&h != 0 }

// Is reports whether every flag in f is set.
func (i *OpInfo) Is(f Flags) bool { return i.Flags&f == f }

var opTable [256]OpInfo

// Info returns the table entry for op, or nil if the opcode is unknown.
func (op Opcode) Info() *OpInfo {
	if i := &opTable[op]; i.valid {
		return i
	}
	return nil
}

// Valid reports whether op is an opcode this package knows.
func (op Opcode) Valid() bool { return opTable[op].valid }

// Transport returns the transport base of op (TransportRC, TransportUC, ...).
func (op Opcode) Transport() Opcode { return op & 0xE0 }

// Operation returns the low five bits of op.
func (op Opcode) Operation() Opcode { return op & 0x1F }

func (op Opcode) String() string {
	if i := op.Info(); i != nil {
		return i.Name
	}
	return fmt.Sprintf("Opcode(0x%02x)", uint8(op))
}

var opNames = map[Opcode]string{
	OpSendFirst: "SEND_FIRST", OpSendMiddle: "SEND_MIDDLE", OpSendLast: "SEND_LAST",
	OpSendLastImm: "SEND_LAST_WITH_IMMEDIATE", OpSendOnly: "SEND_ONLY",
	OpSendOnlyImm: "SEND_ONLY_WITH_IMMEDIATE", OpWriteFirst: "RDMA_WRITE_FIRST",
	OpWriteMiddle: "RDMA_WRITE_MIDDLE", OpWriteLast: "RDMA_WRITE_LAST",
	OpWriteLastImm: "RDMA_WRITE_LAST_WITH_IMMEDIATE", OpWriteOnly: "RDMA_WRITE_ONLY",
	OpWriteOnlyImm: "RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpReadRequest: "RDMA_READ_REQUEST",
	OpReadResponseFirst: "RDMA_READ_RESPONSE_FIRST", OpReadResponseMiddle: "RDMA_READ_RESPONSE_MIDDLE",
	OpReadResponseLast: "RDMA_READ_RESPONSE_LAST", OpReadResponseOnly: "RDMA_READ_RESPONSE_ONLY",
	OpAcknowledge: "ACKNOWLEDGE", OpAtomicAcknowledge: "ATOMIC_ACKNOWLEDGE",
	OpCompareSwap: "COMPARE_SWAP", OpFetchAdd: "FETCH_ADD",
	OpSendLastInv: "SEND_LAST_WITH_INVALIDATE", OpSendOnlyInv: "SEND_ONLY_WITH_INVALIDATE",
	OpFlush: "FLUSH", OpAtomicWrite: "ATOMIC_WRITE",
}

// opShape is the transport-independent description of an operation.
type opShape struct {
	flags   Flags
	headers Header
	fixed   int
}

var shapes = map[Opcode]opShape{
	OpSendFirst:          {FlagRequest | FlagSend | FlagFirst | FlagStart, HdrPayload, -1},
	OpSendMiddle:         {FlagRequest | FlagSend | FlagMiddle, HdrPayload, -1},
	OpSendLast:           {FlagRequest | FlagSend | FlagLast | FlagComplete, HdrPayload, -1},
	OpSendLastImm:        {FlagRequest | FlagSend | FlagLast | FlagComplete | FlagImm, HdrImmDt | HdrPayload, -1},
	OpSendOnly:           {FlagRequest | FlagSend | FlagStart | FlagComplete, HdrPayload, -1},
	OpSendOnlyImm:        {FlagRequest | FlagSend | FlagStart | FlagComplete | FlagImm, HdrImmDt | HdrPayload, -1},
	OpWriteFirst:         {FlagRequest | FlagWrite | FlagFirst | FlagStart, HdrRETH | HdrPayload, -1},
	OpWriteMiddle:        {FlagRequest | FlagWrite | FlagMiddle, HdrPayload, -1},
	OpWriteLast:          {FlagRequest | FlagWrite | FlagLast | FlagComplete, HdrPayload, -1},
	OpWriteLastImm:       {FlagRequest | FlagWrite | FlagLast | FlagComplete | FlagImm, HdrImmDt | HdrPayload, -1},
	OpWriteOnly:          {FlagRequest | FlagWrite | FlagStart | FlagComplete, HdrRETH | HdrPayload, -1},
	OpWriteOnlyImm:       {FlagRequest | FlagWrite | FlagStart | FlagComplete | FlagImm, HdrRETH | HdrImmDt | HdrPayload, -1},
	OpReadRequest:        {FlagRequest | FlagRead | FlagStart | FlagComplete, HdrRETH, 0},
	OpReadResponseFirst:  {FlagResponse | FlagFirst | FlagStart, HdrAETH | HdrPayload, -1},
	OpReadResponseMiddle: {FlagResponse | FlagMiddle, HdrPayload, -1},
	OpReadResponseLast:   {FlagResponse | FlagLast | FlagComplete, HdrAETH | HdrPayload, -1},
	OpReadResponseOnly:   {FlagResponse | FlagStart | FlagComplete, HdrAETH | HdrPayload, -1},
	OpAcknowledge:        {FlagResponse | FlagStart | FlagComplete, HdrAETH, 0},
	OpAtomicAcknowledge:  {FlagResponse | FlagStart | FlagComplete, HdrAETH | HdrAtomicAckETH, 0},
	OpCompareSwap:        {FlagRequest | FlagAtomic | FlagStart | FlagComplete, HdrAtomicETH, 0},
	OpFetchAdd:           {FlagRequest | FlagAtomic | FlagStart | FlagComplete, HdrAtomicETH, 0},
	OpSendLastInv:        {FlagRequest | FlagSend | FlagLast | FlagComplete | FlagInv, HdrIETH | HdrPayload, -1},
	OpSendOnlyInv:        {FlagRequest | FlagSend | FlagStart | FlagComplete | FlagInv, HdrIETH | HdrPayload, -1},
	OpFlush:              {FlagRequest | FlagFlush | FlagStart | FlagComplete, HdrFETH | HdrRETH, 0},
	OpAtomicWrite:        {FlagRequest | FlagAtomicWrite | FlagStart | FlagComplete, HdrRETH | HdrPayload, 8},
}

func define(op Opcode, name string, s opShape) {
	i := &opTable[op]
	*i = OpInfo{Name: name, Flags: s.flags, Headers: s.headers, FixedPayload: s.fixed, valid: true}
	i.offRETH, i.offAETH, i.offDETH, i.offImm, i.offIETH, i.offAtomic, i.offAtomicAck, i.offFETH = -1, -1, -1, -1, -1, -1, -1, -1
	off := BTHLen
	for _, h := range headerOrder {
		if s.headers&h.h == 0 {
			continue
		}
		switch h.h {
		case HdrRETH:
			i.offRETH = int8(off)
		case HdrAETH:
			i.offAETH = int8(off)
		case HdrDETH:
			i.offDETH = int8(off)
		case HdrImmDt:
			i.offImm = int8(off)
		case HdrIETH:
			i.offIETH = int8(off)
		case HdrAtomicETH:
			i.offAtomic = int8(off)
		case HdrAtomicAckETH:
			i.offAtomicAck = int8(off)
		case HdrFETH:
			i.offFETH = int8(off)
		}
		off += h.n
	}
	i.HdrLen = off
}

func init() {
	for op, s := range shapes {
		define(TransportRC|op, "RC "+opNames[op], s)
		// UC carries SEND and WRITE only.
		if op <= OpWriteOnlyImm {
			define(TransportUC|op, "UC "+opNames[op], s)
		}
	}
	for _, op := range []Opcode{OpSendOnly, OpSendOnlyImm} {
		s := shapes[op]
		s.headers |= HdrDETH
		define(TransportUD|op, "UD "+opNames[op], s)
	}
	define(CNP, "CNP", opShape{0, HdrCNPPad, 0})
}
