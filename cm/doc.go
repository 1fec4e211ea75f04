// Package cm is the InfiniBand Communication Manager (IBTA volume 1 chapter
// 12) of a softrdma device: the protocol that sets up and tears down
// connections by exchanging MADs between the GSI queue pairs (QP1) of two
// devices. It is the layer Linux calls ib_cm; package rdmacm builds the
// rdma_cm model on top of it.
//
// A Manager owns a device's GSI QP (created with verbs.PD.CreateGSIQP, so
// MADs travel through the same engine as every UD QP, as UD SEND ONLY
// packets with Q_Key 0x80010000 and P_Key index 0). It keeps one listener
// table keyed by service ID and a table of connections keyed by local
// communication ID.
//
// A Conn is one CM exchange, active or passive:
//
//	active:  SendREQ -> (MRA) -> EventREP -> SendRTU -> established
//	passive: EventREQ -> (SendMRA) -> SendREP -> EventEstablished (RTU)
//	either:  SendDREQ -> EventDREP -> time wait -> EventTimeWaitExit
//	         EventDREQ -> SendDREP -> time wait -> EventTimeWaitExit
//	UD:      SendSIDRReq -> EventSIDRRep;  EventSIDRReq -> SendSIDRRep
//
// Requests (REQ, REP, DREQ, SIDR_REQ) are retransmitted after the response
// timeout until the retry count runs out, when the Conn gets EventTimeout
// (REQ and REP timeouts also send a REJ with reason "timeout"). An MRA
// extends the wait by the peer's service timeout. Duplicates are absorbed: a
// repeated REQ is answered with an MRA (while the application decides) or
// the REP already sent, a repeated REP with the RTU already sent, a repeated
// DREQ in time wait with a DREP; a REQ for a connection in time wait gets a
// REJ "stale connection", a REQ for a service nobody listens on a REJ
// "invalid service ID", and a DREQ for an unknown connection a DREP.
//
// Events are delivered to the Conn's Handler from the Manager's goroutines
// (the receive loop and timers), never with a lock held, so handlers may call
// back into the Conn.
package cm
