// Events and event channels of the rdma_cm model.

package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// EventType is the kind of an rdma_cm event (enum rdma_cm_event_type, same
// values).
type EventType int

// Event types.
const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
	EventTimewaitExit    EventType = 15
)

var eventNames = map[EventType]string{
	EventAddrResolved: "RDMA_CM_EVENT_ADDR_RESOLVED", EventAddrError: "RDMA_CM_EVENT_ADDR_ERROR",
	EventRouteResolved: "RDMA_CM_EVENT_ROUTE_RESOLVED", EventRouteError: "RDMA_CM_EVENT_ROUTE_ERROR",
	EventConnectRequest: "RDMA_CM_EVENT_CONNECT_REQUEST", EventConnectResponse: "RDMA_CM_EVENT_CONNECT_RESPONSE",
	EventConnectError: "RDMA_CM_EVENT_CONNECT_ERROR", EventUnreachable: "RDMA_CM_EVENT_UNREACHABLE",
	EventRejected: "RDMA_CM_EVENT_REJECTED", EventEstablished: "RDMA_CM_EVENT_ESTABLISHED",
	EventDisconnected: "RDMA_CM_EVENT_DISCONNECTED", EventDeviceRemoval: "RDMA_CM_EVENT_DEVICE_REMOVAL",
	EventTimewaitExit:  "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	EventMulticastJoin: "RDMA_CM_EVENT_MULTICAST_JOIN", EventMulticastError: "RDMA_CM_EVENT_MULTICAST_ERROR",
}

// String returns the name rdma_event_str gives.
func (e EventType) String() string {
	if s, ok := eventNames[e]; ok {
		return s
	}
	return fmt.Sprintf("RDMA_CM_EVENT(%d)", int(e))
}

// Negative errno statuses, as Linux rdma_cm reports them.
const (
	StatusTimedOut      = -110 // -ETIMEDOUT
	StatusConnRefused   = -111 // -ECONNREFUSED
	StatusConnReset     = -104 // -ECONNRESET
	StatusAddrNotAvail  = -99  // -EADDRNOTAVAIL
	StatusInvalid       = -22  // -EINVAL
	StatusNetUnreach    = -101 // -ENETUNREACH
	StatusNoMemory      = -12  // -ENOMEM
	StatusHostUnreach   = -113 // -EHOSTUNREACH
	StatusNotConnected  = -107 // -ENOTCONN
	StatusNoBufferSpace = -105 // -ENOBUFS
	StatusNotSupported  = -95  // -EOPNOTSUPP
)

// ConnParam are connection parameters (struct rdma_conn_param).
type ConnParam struct {
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	RetryCount         uint8 // 0..7
	RNRRetryCount      uint8 // 0..7
	SRQ                bool
	QPNum              wire.QPN // the peer's QPN in events
}

// UDParam are the parameters of a UD "connection" (struct rdma_ud_param):
// how to reach the peer's QP.
type UDParam struct {
	PrivateData []byte
	AH          verbs.AHAttr
	QPNum       wire.QPN
	QKey        wire.QKey
}

// Event is an rdma_cm event (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the ID the event is about; for EventConnectRequest, the new
	// ID of the incoming connection.
	ID *ID
	// ListenID is the listening ID, for EventConnectRequest.
	ListenID *ID
	// Status is 0, a negative errno (StatusTimedOut ...) or, for
	// EventRejected, the CM reject reason.
	Status int
	// Conn are the peer's parameters (connected port spaces); UD those of
	// the peer's UD QP (the UDP port space).
	Conn ConnParam
	UD   UDParam
	// Multicast is the group address of EventMulticastJoin and
	// EventMulticastError, and McastContext the context given to
	// JoinMulticast (librdmacm hands it over as the private data).
	Multicast    netip.Addr
	McastContext any
	// Err is why an InfiniBand route resolution failed (EventRouteError):
	// it wraps cm.ErrNoSA (no answer from the subnet administrator) or
	// cm.ErrNoPath (the SA has no path to the destination).
	Err error
}

// PrivateData returns the private data of the event.
func (e *Event) PrivateData() []byte {
	if e.ID != nil && e.ID.ps == PortSpaceUDP {
		return e.UD.PrivateData
	}
	return e.Conn.PrivateData
}

// String describes the event: its type and status.
func (e *Event) String() string {
	return fmt.Sprintf("%v status %d", e.Type, e.Status)
}

// ErrEvent is the error a synchronous call returns when the operation ends
// with an event other than the one it waits for; Event holds it.
type ErrEvent struct {
	Event *Event
	Want  EventType
}

// Error describes the unexpected event; a rejection says why, in the
// words every softrdma tool uses, for example "rdmacm: connection
// rejected: no server listens on that port (reason 8)".
func (e *ErrEvent) Error() string {
	switch e.Event.Type {
	case EventRejected:
		return fmt.Sprintf("rdmacm: connection rejected: %s (reason %d)", RejectText(e.Event.Status), e.Event.Status)
	case EventUnreachable:
		if e.Event.Status == StatusTimedOut {
			return "rdmacm: peer unreachable: no answer from the peer"
		}
		return fmt.Sprintf("rdmacm: peer unreachable (status %d)", e.Event.Status)
	}
	if e.Event.Err != nil {
		return fmt.Sprintf("rdmacm: %v (status %d): %v", e.Event.Type, e.Event.Status, e.Event.Err)
	}
	return fmt.Sprintf("rdmacm: %v (status %d), want %v", e.Event.Type, e.Event.Status, e.Want)
}

// RejectReason returns the CM reject reason of an EventRejected, and 0
// for other events.
func (e *ErrEvent) RejectReason() RejectReason {
	if e.Event.Type != EventRejected {
		return 0
	}
	return RejectReason(e.Event.Status)
}

// RejectReason is the reason code of a CM REJ: the Status of an
// EventRejected.
type RejectReason = mad.RejectReason

// Reject reasons a connecting program commonly meets.
const (
	// RejectNoListener: nothing listens on the port (invalid service ID).
	RejectNoListener = mad.RejectInvalidServiceID
	// RejectConsumer: the server's program rejected the request (Reject).
	RejectConsumer = mad.RejectConsumer
	// RejectTimeout: the peer timed out waiting for the next message.
	RejectTimeout = mad.RejectTimeout
	// RejectNoResources: the peer had no room for the connection (its
	// backlog was full, or it could not create the QP).
	RejectNoResources = mad.RejectNoResources
)

// RejectText describes an EventRejected's status for people: what the
// reason means to the program that tried to connect.
func RejectText(status int) string {
	switch RejectReason(status) {
	case RejectNoListener:
		return "no server listens on that port"
	case RejectConsumer:
		return "the server refused it"
	case RejectTimeout:
		return "the peer timed out waiting for us"
	case RejectNoResources, mad.RejectNoQP:
		return "the server has no room for it"
	case mad.RejectStaleConnection:
		return "the server still holds a stale connection from this side"
	case mad.RejectInvalidMTU:
		return "the path MTU is not acceptable to the server"
	}
	return RejectReason(status).String()
}

// Unwrap returns the event's Err, if any (cm.ErrNoSA, cm.ErrNoPath).
func (e *ErrEvent) Unwrap() error { return e.Event.Err }

// Is makes errors.Is(err, ErrRejected) and friends work.
func (e *ErrEvent) Is(target error) bool {
	switch e.Event.Type {
	case EventRejected:
		return target == ErrRejected
	case EventUnreachable:
		return target == ErrUnreachable
	case EventConnectError, EventAddrError, EventRouteError:
		return target == ErrConnect
	case EventDisconnected:
		return target == ErrDisconnected
	}
	return false
}

// Sentinels of the package; errors wrap them (test with errors.Is).
var (
	// ErrInvalid: an argument is out of range (EINVAL).
	ErrInvalid = errors.New("rdmacm: invalid argument")
	// ErrState: the ID is not in a state that allows the call.
	ErrState = errors.New("rdmacm: invalid state")
	// ErrClosed: the CM, ID, channel or listener is closed.
	ErrClosed = errors.New("rdmacm: closed")
	// ErrAddrInUse: the port (or service ID) is taken (EADDRINUSE).
	ErrAddrInUse = errors.New("rdmacm: address in use")
	// ErrNoDevice: no device owns the address (EADDRNOTAVAIL).
	ErrNoDevice = errors.New("rdmacm: no device for address")
	// ErrRejected: the peer rejected the connection (EventRejected).
	ErrRejected = errors.New("rdmacm: connection rejected")
	// ErrUnreachable: the peer did not answer (EventUnreachable).
	ErrUnreachable = errors.New("rdmacm: peer unreachable")
	// ErrConnect: resolving or connecting failed (EventConnectError,
	// EventAddrError, EventRouteError).
	ErrConnect = errors.New("rdmacm: connection error")
	// ErrDisconnected: the connection went away during the call.
	ErrDisconnected = errors.New("rdmacm: disconnected")
)

func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// EventChannel queues the events of the IDs created on it (struct
// rdma_event_channel). The queue is unbounded; read it with Get.
type EventChannel struct {
	mu     sync.Mutex
	q      []*Event
	notify chan struct{}
	closed bool
	// handle, if set, takes each event as it is posted instead of the
	// queue (Dial's connections: no goroutine per connection waits on
	// their channel). It runs on the posting goroutine and must not block.
	handle func(*Event)
}

// NewEventChannel creates an event channel (rdma_create_event_channel).
func NewEventChannel() *EventChannel {
	return &EventChannel{notify: make(chan struct{}, 1)}
}

func (ch *EventChannel) post(ev *Event) {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	if h := ch.handle; h != nil {
		ch.mu.Unlock()
		h(ev)
		return
	}
	ch.q = append(ch.q, ev)
	ch.mu.Unlock()
	select {
	case ch.notify <- struct{}{}:
	default:
	}
}

// enqueue queues ev unless the channel has a handler, and reports whether
// it did (a closed channel drops it and reports true).
func (ch *EventChannel) enqueue(ev *Event) bool {
	ch.mu.Lock()
	if ch.handle != nil {
		ch.mu.Unlock()
		return false
	}
	if !ch.closed {
		ch.q = append(ch.q, ev)
	}
	ch.mu.Unlock()
	ch.wake()
	return true
}

// wake tells a waiting Get to look at the queue.
func (ch *EventChannel) wake() {
	select {
	case ch.notify <- struct{}{}:
	default:
	}
}

// handleWith has h take the events queued and every later one (see
// handle).
func (ch *EventChannel) handleWith(h func(*Event)) {
	ch.mu.Lock()
	q := ch.q
	ch.q = nil
	ch.handle = h
	ch.mu.Unlock()
	for _, ev := range q {
		h(ev)
	}
}

// Get returns the next event, waiting for one (rdma_get_cm_event).
func (ch *EventChannel) Get(ctx context.Context) (*Event, error) {
	for {
		ch.mu.Lock()
		if len(ch.q) > 0 {
			ev := ch.q[0]
			ch.q[0] = nil
			ch.q = ch.q[1:]
			ch.mu.Unlock()
			return ev, nil
		}
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return nil, errf(ErrClosed, "event channel")
		}
		select {
		case <-ch.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close closes the channel; Get fails once the queue is empty.
func (ch *EventChannel) Close() error {
	ch.mu.Lock()
	ch.closed = true
	ch.mu.Unlock()
	select {
	case ch.notify <- struct{}{}:
	default:
	}
	return nil
}
