//go:build capi

package main

/*
#include "srd.h"
*/
import "C"

import "github.com/softrdma/softrdma/verbs"

//export srdgo_resize_cq
func srdgo_resize_cq(h C.uintptr_t, cqe C.int, size *C.int) C.int {
	q, ok := get[*cq](h)
	if !ok {
		return C.EINVAL
	}
	q.mu.Lock() // ibv_poll_cq's scratch grows with the CQ
	defer q.mu.Unlock()
	if err := q.cq.Resize(int(cqe)); err != nil {
		return errno(err)
	}
	n := q.cq.Cap()
	if n > len(q.wcs) {
		q.wcs = make([]verbs.WC, n)
	}
	*size = C.int(n)
	return 0
}
