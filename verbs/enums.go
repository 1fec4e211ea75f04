// Enumerations of the verbs model: QP types and states, work request opcodes
// and flags, completion opcodes and statuses, access flags, MTUs and async
// event types. Values follow libibverbs so numbers mean the same to RDMA users.

package verbs

import (
	"fmt"

	"github.com/softrdma/softrdma/internal/mem"
)

// QPType is the transport service of a queue pair.
type QPType int

// QP types (values of enum ibv_qp_type).
const (
	RC QPType = 2
	UC QPType = 3
	UD QPType = 4
)

func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", int(t))
}

// QPState is a state of the IBTA queue pair state machine.
type QPState int

// QP states (values of enum ibv_qp_state).
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", int(s))
}

// MTU is an IB path MTU code.
type MTU int

// Path MTUs (values of enum ibv_mtu).
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size of the MTU, or 0 if the code is invalid.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string {
	if b := m.Bytes(); b > 0 {
		return fmt.Sprint(b)
	}
	return fmt.Sprintf("MTU(%d)", int(m))
}

// MTUFromBytes returns the largest MTU code not above n bytes, or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// Access is a set of memory and QP access permissions, with the values of
// libibverbs' ibv_access_flags.
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC

	// FLUSH (flush.go): a region, and a QP, allow FLUSHes of the
	// placement types they have.
	AccessFlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT
)

// The memory table takes the flags as they are: a compile-time check.
var _ = [1]struct{}{}[AccessLocalWrite^Access(mem.LocalWrite)|AccessRemoteWrite^Access(mem.RemoteWrite)|
	AccessRemoteRead^Access(mem.RemoteRead)|AccessRemoteAtomic^Access(mem.RemoteAtomic)|
	AccessFlushGlobal^Access(mem.FlushGlobal)|AccessFlushPersistent^Access(mem.FlushPersistent)]

// String lists the flags as libibverbs names them, for example
// "LOCAL_WRITE|REMOTE_READ".
func (a Access) String() string { return mem.Access(a).String() }

// WROpcode is the operation of a send work request (ibv_wr_opcode).
type WROpcode int

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6

	// IBTA 1.5 (Annex A19), RC only: see flush.go.
	WRFlush       WROpcode = 14 // IBV_WR_FLUSH
	WRAtomicWrite WROpcode = 15 // IBV_WR_ATOMIC_WRITE
)

func (o WROpcode) String() string {
	if i := wrInfoOf(o); i != nil {
		return i.name
	}
	return fmt.Sprintf("WROpcode(%d)", int(o))
}

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags int

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// WCOpcode is the operation a completion reports (ibv_wc_opcode).
type WCOpcode int

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCFlush           WCOpcode = 8
	WCAtomicWrite     WCOpcode = 9
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

var wcNames = map[WCOpcode]string{WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ",
	WCCompSwap: "COMP_SWAP", WCFetchAdd: "FETCH_ADD", WCRecv: "RECV", WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
	WCFlush: "FLUSH", WCAtomicWrite: "ATOMIC_WRITE"}

func (o WCOpcode) String() string {
	if s, ok := wcNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WCOpcode(%d)", int(o))
}

// Status is the outcome of a work request (ibv_wc_status).
type Status int

// Completion statuses.
const (
	Success        Status = 0
	LocLenErr      Status = 1
	LocQPOpErr     Status = 2
	LocEECOpErr    Status = 3
	LocProtErr     Status = 4
	WRFlushErr     Status = 5
	MWBindErr      Status = 6
	BadRespErr     Status = 7
	LocAccessErr   Status = 8
	RemInvReqErr   Status = 9
	RemAccessErr   Status = 10
	RemOpErr       Status = 11
	RetryExcErr    Status = 12
	RNRRetryExcErr Status = 13
	LocRDDViolErr  Status = 14
	RemInvRDReqErr Status = 15
	RemAbortErr    Status = 16
	InvEECNErr     Status = 17
	InvEECStateErr Status = 18
	FatalErr       Status = 19
	RespTimeoutErr Status = 20
	GeneralErr     Status = 21
)

var statusNames = [...]string{"success", "local length error", "local QP operation error",
	"local EE context operation error", "local protection error", "Work Request Flushed Error",
	"memory management operation error", "bad response error", "local access error",
	"remote invalid request error", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
	"remote invalid RD request", "operation aborted", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error"}

// String returns the text ibv_wc_status_str gives.
func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// WCFlags describe a completion (ibv_wc_flags).
type WCFlags int

// Completion flags.
const (
	WCGRH     WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
)

// EventType is the kind of an asynchronous event (ibv_event_type).
type EventType int

// Asynchronous event types.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
)

var eventNames = map[EventType]string{EventCQErr: "CQ error", EventQPFatal: "local work queue catastrophic error",
	EventQPReqErr: "invalid request local work queue error", EventQPAccessErr: "local access violation work queue error",
	EventCommEst: "communication established", EventSQDrained: "send queue drained",
	EventPathMig: "path migrated", EventPathMigErr: "path migration request error",
	EventDeviceFatal: "local catastrophic error", EventPortActive: "port active", EventPortErr: "port error",
	EventLIDChange: "LID change", EventPKeyChange: "P_Key change", EventSMChange: "SM change",
	EventSRQErr: "SRQ catastrophic error", EventSRQLimitReached: "SRQ limit reached",
	EventQPLastWQEReached: "last WQE reached", EventClientReregister: "client reregistration",
	EventGIDChange: "GID table change"}

// String returns the text ibv_event_type_str gives.
func (e EventType) String() string {
	if s, ok := eventNames[e]; ok {
		return s
	}
	return fmt.Sprintf("EventType(%d)", int(e))
}
