//go:build capi

package main

/*
#include "srd.h"
*/
import "C"

import "github.com/softrdma/softrdma/verbs"

// The Go side of ibv_create_cq_ex's CQs (cqex.c): made as the others, with
// the engine's completion timestamps when the program asks for them, and
// polled one completion at a time by start_poll and next_poll, so that a
// program ending its poll early leaves the rest in the CQ.

//export srdgo_create_cq_ex
func srdgo_create_cq_ex(h C.uintptr_t, cqe C.int, chh C.uintptr_t, self *C.struct_ibv_cq, ts, wall C.int,
	out *C.uintptr_t, size *C.int) C.int {
	var t verbs.WCTimestamps
	if ts != 0 {
		t |= verbs.WCWithCompletionTimestamp
	}
	if wall != 0 {
		t |= verbs.WCWithCompletionTimestampWallclock
	}
	return createCQ(h, cqe, chh, self, out, size, t)
}

// srdgo_poll_cq_ex polls one completion into wc and its timestamps: 1,
// or 0 if the CQ is empty, or -1 for a handle that is not a CQ.
//
//export srdgo_poll_cq_ex
func srdgo_poll_cq_ex(h C.uintptr_t, wc *C.struct_ibv_wc, ts, wall *C.uint64_t) C.int {
	q, ok := get[*cq](h)
	if !ok {
		return -1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq.Poll(q.wcs[:1]) == 0 {
		return 0
	}
	w := &q.wcs[0]
	wcOut(w, wc)
	*ts, *wall = C.uint64_t(w.Timestamp), C.uint64_t(w.WallclockNS)
	return 1
}
