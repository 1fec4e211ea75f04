// Package verbs is softrdma's RDMA device: the verbs model of libibverbs in
// Go, over any link.Link, with its transport engine (RoCEv2 RC, UC and UD).
//
// A Device comes from Open on a link (package roce opens one on UDP sockets,
// link/loop gives an in-process network for tests). From it:
//
//   - AllocPD makes a protection domain; PD.RegMR registers memory (an MR,
//     with its L_Key and R_Key), PD.CreateQP makes queue pairs, PD.CreateSRQ
//     shared receive queues, PD.CreateAH address handles for UD.
//   - CreateCQ makes completion queues, optionally with a CompChannel for
//     completion events; CQ.Poll returns work completions (WC) without
//     blocking, CQ.Wait waits for them with a context (no channel needed).
//   - A QP moves RESET -> INIT -> RTR -> RTS with QP.Modify, as ibv_modify_qp:
//     the attributes each transition needs and allows follow the IBTA table.
//     QP.PostSend and QP.PostRecv post work requests (SendWR, RecvWR) with
//     scatter/gather lists (SGE) into registered memory, or inline data
//     from a byte slice (SendWR.Inline): SEND with or without immediate
//     data, RDMA WRITE (with immediate), RDMA READ and the two atomics.
//
// Every misuse returns an error wrapping one of the sentinels (ErrInvalid,
// ErrState, ...), for errors.Is. A work request that fails completes with an
// IBTA status (WC.Status); WC.Err turns it into an error that matches the
// status. Devices, QPs and the rest are safe for concurrent use; posting and
// polling do not allocate.
//
// Connections are usually set up with rdma_cm (package rdmacm, Dial and
// Listen) rather than by hand; the package example shows the hand-made way.
// docs/DESIGN.md in the repository describes the engine.
package verbs
