package verbs

import (
	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// wrClass is what a work request does: the requester core's classes.
type wrClass = requester.Class

const (
	classSend   = requester.Send   // a message into the peer's receive queue
	classWrite  = requester.Write  // data into the peer's memory (RETH)
	classRead   = requester.Read   // data from the peer's memory, in READ responses
	classAtomic = requester.Atomic // an 8-byte atomic on the peer's memory
	classLocal  = requester.Local  // done by the requester itself (BIND_MW, LOCAL_INV; mw.go)
)

// wrInfo is everything the engine decides by a send work request's opcode:
// posting checks, request opcodes, credits and completions all read it here.
type wrInfo struct {
	name  string
	class wrClass
	imm   bool     // carries immediate data
	types qpTypes  // the QP types that may post it
	wc    WCOpcode // the completion's opcode
	// req is the request's opcode without transport: for SEND and WRITE
	// the FIRST of their family (ONLY, LAST and their _IMM forms follow
	// it in the same layout), for READ and atomics the only one.
	req wire.Opcode
}

// qpTypes is a set of QP types.
type qpTypes uint8

func typesOf(ts ...QPType) qpTypes {
	var s qpTypes
	for _, t := range ts {
		s |= 1 << t
	}
	return s
}

func (s qpTypes) has(t QPType) bool { return t >= 0 && t < 8 && s&(1<<t) != 0 }

// wrTable is indexed by WROpcode.
var wrTable = [...]wrInfo{
	WRRDMAWrite:         {"RDMA_WRITE", classWrite, false, typesOf(RC, UC), WCRDMAWrite, wire.OpWriteFirst},
	WRRDMAWriteWithImm:  {"RDMA_WRITE_WITH_IMM", classWrite, true, typesOf(RC, UC), WCRDMAWrite, wire.OpWriteFirst},
	WRSend:              {"SEND", classSend, false, typesOf(RC, UC, UD), WCSend, wire.OpSendFirst},
	WRSendWithImm:       {"SEND_WITH_IMM", classSend, true, typesOf(RC, UC, UD), WCSend, wire.OpSendFirst},
	WRRDMARead:          {"RDMA_READ", classRead, false, typesOf(RC), WCRDMARead, wire.OpReadRequest},
	WRAtomicCmpAndSwp:   {"ATOMIC_CMP_AND_SWP", classAtomic, false, typesOf(RC), WCCompSwap, wire.OpCompareSwap},
	WRAtomicFetchAndAdd: {"ATOMIC_FETCH_AND_ADD", classAtomic, false, typesOf(RC), WCFetchAdd, wire.OpFetchAdd},
	// Memory windows and invalidation (mw.go). SEND_WITH_INV's IETH
	// opcodes exist for RC only.
	WRLocalInv:    {"LOCAL_INV", classLocal, false, typesOf(RC, UC), WCLocalInv, 0},
	WRBindMW:      {"BIND_MW", classLocal, false, typesOf(RC, UC), WCBindMW, 0},
	WRSendWithInv: {"SEND_WITH_INV", classSend, false, typesOf(RC), WCSend, wire.OpSendFirst},
	// FLUSH and ATOMIC_WRITE: READs of no bytes to the core (flush.go).
	WRFlush:       {"FLUSH", classRead, false, typesOf(RC), WCFlush, wire.OpFlush},
	WRAtomicWrite: {"ATOMIC_WRITE", classRead, false, typesOf(RC), WCAtomicWrite, wire.OpAtomicWrite},
}

// wrInfoOf returns the opcode's entry, or nil for an unknown opcode.
func wrInfoOf(op WROpcode) *wrInfo {
	if op < 0 || int(op) >= len(wrTable) || wrTable[op].name == "" {
		return nil
	}
	return &wrTable[op]
}

// rdAtomic reports whether the request waits for a response carrying data
// (READ, atomics): it uses one of the requester's max_rd_atomic credits, a
// fence waits for it, and it may not be inline.
func (i *wrInfo) rdAtomic() bool { return i.class == classRead || i.class == classAtomic }

// multiPacket reports whether the message is cut into path-MTU packets
// (SEND, WRITE), each of its own PSN; a READ's PSNs are its responses'.
func (i *wrInfo) multiPacket() bool { return i.class == classSend || i.class == classWrite }

// solicitable reports whether the solicited event flag applies: to the last
// packet of a message that consumes a receive WQE.
func (i *wrInfo) solicitable() bool { return i.class == classSend || i.imm }

// requestOpcode returns the wire opcode of a request packet: first and last
// say where the packet lies in its message.
func (i *wrInfo) requestOpcode(t QPType, first, last bool) wire.Opcode {
	o := i.req
	if i.multiPacket() {
		switch {
		case first && last:
			o += wire.OpSendOnly - wire.OpSendFirst
		case last:
			o += wire.OpSendLast - wire.OpSendFirst
		case !first:
			o += wire.OpSendMiddle - wire.OpSendFirst
		}
		if i.imm && last {
			o++ // LAST_IMM and ONLY_IMM follow LAST and ONLY
		}
		if last && i == &wrTable[WRSendWithInv] {
			return invOpcode(transportOf(t) | o) // RC only (mw.go)
		}
	}
	return transportOf(t) | o
}

// transportOf returns the BTH opcode's transport bits of a QP type.
func transportOf(t QPType) wire.Opcode {
	switch t {
	case UC:
		return wire.TransportUC
	case UD:
		return wire.TransportUD
	}
	return wire.TransportRC
}
