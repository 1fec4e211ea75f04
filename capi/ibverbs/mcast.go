//go:build capi

package main

/*
#include "srdcm.h"
*/
import "C"

import (
	"context"
	"errors"
	"unsafe"

	"github.com/softrdma/softrdma/rdmacm"
)

// Multicast on RoCE (mcast.c): rdma_join_multicast and
// rdma_leave_multicast over rdmacm's JoinMulticast and LeaveMulticast.
// The program's context pointer travels with the join as the event's
// McastContext and comes back as the MULTICAST_JOIN event's private data,
// as librdmacm hands it over.

// mcastContext is the program's context of a join: a C pointer, never
// dereferenced on the Go side.
type mcastContext struct{ p unsafe.Pointer }

//export srdgo_cm_join
func srdgo_cm_join(h C.uintptr_t, sa *C.struct_sockaddr, mctx unsafe.Pointer) C.int {
	i, ok := get[*cmID](h)
	a, ok2 := addrIn(sa)
	if !ok || !ok2 {
		return C.EINVAL
	}
	// The ID has a channel: the join's event is queued, not waited for.
	return cmErrno(i.id.JoinMulticast(context.Background(), a.Addr(), mcastContext{mctx}))
}

//export srdgo_cm_leave
func srdgo_cm_leave(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	i, ok := get[*cmID](h)
	a, ok2 := addrIn(sa)
	if !ok || !ok2 {
		return C.EINVAL
	}
	if err := i.id.LeaveMulticast(a.Addr()); err != nil {
		if errors.Is(err, rdmacm.ErrInvalid) {
			return C.EADDRNOTAVAIL // librdmacm's errno for a group not joined
		}
		return cmErrno(err)
	}
	return 0
}

// mcastEventContext returns the program's context of a multicast event,
// or nil.
func mcastEventContext(ev *rdmacm.Event) unsafe.Pointer {
	if m, ok := ev.McastContext.(mcastContext); ok {
		return m.p
	}
	return nil
}
