package verbs

import (
	"sync/atomic"

	"github.com/softrdma/softrdma/wire"
)

// qpTable maps QPNs to QPs for the receive path: a lookup takes no lock (two
// atomic loads), and adding or removing a QP, under the device lock, costs
// O(1) whatever the number of QPs. The 24-bit QPN space is split in 4096
// chunks of 4096 entries, each allocated (32 KiB) while it holds a QP.
type qpTable struct {
	chunks [qpChunks]atomic.Pointer[qpChunk]
	count  [qpChunks]uint16 // QPs in each chunk; guarded by the device lock
}

const (
	qpChunkBits = 12
	qpChunks    = 1 << (24 - qpChunkBits)
	qpChunkMask = 1<<qpChunkBits - 1
)

type qpChunk [1 << qpChunkBits]atomic.Pointer[QP]

// get returns the QP numbered n, or nil.
func (t *qpTable) get(n wire.QPN) *QP {
	c := t.chunks[n>>qpChunkBits&(qpChunks-1)].Load()
	if c == nil {
		return nil
	}
	return c[n&qpChunkMask].Load()
}

// set adds qp under its QPN. The caller holds the device lock and has made
// sure the QPN is free.
func (t *qpTable) set(qp *QP) {
	i := qp.qpn >> qpChunkBits & (qpChunks - 1)
	c := t.chunks[i].Load()
	if c == nil {
		c = new(qpChunk)
		t.chunks[i].Store(c)
	}
	c[qp.qpn&qpChunkMask].Store(qp)
	t.count[i]++
}

// del removes the QP numbered n. The caller holds the device lock.
func (t *qpTable) del(n wire.QPN) {
	i := n >> qpChunkBits & (qpChunks - 1)
	c := t.chunks[i].Load()
	if c == nil || c[n&qpChunkMask].Swap(nil) == nil {
		return
	}
	if t.count[i]--; t.count[i] == 0 {
		t.chunks[i].Store(nil)
	}
}
