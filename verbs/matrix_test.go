// The data-integrity matrix: every operation each QP type allows, at several
// path MTUs, message sizes and SGE counts, over link/loop, on a clean network
// and (RC) on lossy, corrupting and jittery ones. Data is checked byte for
// byte, including the bytes around every buffer; completions field by field.
// Also: UC under loss, and the allocation checks of the hot path.

package verbs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// mop is an operation of the matrix.
type mop int

const (
	opSend mop = iota
	opSendImm
	opWrite
	opWriteImm
	opRead
	opCAS
	opFAA
)

var mopNames = [...]string{"SEND", "SEND_WITH_IMM", "WRITE", "WRITE_WITH_IMM", "READ", "CAS", "FAA"}

func (o mop) String() string { return mopNames[o] }

func (o mop) wr() WROpcode {
	return [...]WROpcode{WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead,
		WRAtomicCmpAndSwp, WRAtomicFetchAndAdd}[o]
}

func (o mop) hasImm() bool { return o == opSendImm || o == opWriteImm }

// opsOf lists the operations a QP type allows.
func opsOf(t QPType) []mop {
	switch t {
	case UC:
		return []mop{opSend, opSendImm, opWrite, opWriteImm}
	case UD:
		return []mop{opSend, opSendImm}
	}
	return []mop{opSend, opSendImm, opWrite, opWriteImm, opRead, opCAS, opFAA}
}

// sizesOf lists the message sizes of the matrix: UD stops at the path MTU.
func sizesOf(t QPType, mtu int) []int {
	s := []int{0, 1, mtu - 1, mtu}
	if t == UD {
		return s
	}
	s = append(s, mtu+1)
	if !testing.Short() {
		s = append(s, 1<<20)
	}
	return s
}

var sgeCounts = []int{1, 2, 32}

const (
	mxMRs    = 3            // MRs per side that SGEs are spread over
	mxMRSize = 1<<20 + 8192 // room for 1 MiB in uneven pieces with gaps
	mxWait   = 30 * time.Second
	mxQKey   = 0x11111111 // the Q_Key newPair gives UD QPs
	mxGuard  = 64         // bytes checked past the last piece of a buffer
)

// piece is one SGE's bytes: n bytes at offset off of mr.
type piece struct {
	mr     *MR
	off, n int
}

// sgList is a scatter/gather list as the test lays it out.
type sgList []piece

func (l sgList) sges() []SGE {
	s := make([]SGE, len(l))
	for i, pc := range l {
		s[i] = pc.mr.SGE(pc.off, pc.n)
	}
	return s
}

// put writes data into the pieces in order.
func (l sgList) put(data []byte) {
	for _, pc := range l {
		data = data[copy(pc.mr.Buf()[pc.off:pc.off+pc.n], data):]
	}
}

// get returns the pieces' bytes in order.
func (l sgList) get() []byte {
	var b []byte
	for _, pc := range l {
		b = append(b, pc.mr.Buf()[pc.off:pc.off+pc.n]...)
	}
	return b
}

// layout spreads n bytes over k SGEs of uneven lengths, placed round robin in
// mrs (starting at an MR chosen by salt) at odd offsets with gaps between
// them. With n < k some SGEs are empty.
func layout(mrs []*MR, n, k, salt int) sgList {
	w := make([]int, k)
	tot := 0
	for i := range w {
		w[i] = 1 + (i*7+salt)%5*(1+(i+salt)%3)
		tot += w[i]
	}
	cur := make([]int, len(mrs))
	for j := range cur {
		cur[j] = 1 + (salt*3+j*5)%29
	}
	l := make(sgList, k)
	left := n
	for i := range l {
		m := n * w[i] / tot
		if i == k-1 {
			m = left
		}
		left -= m
		j := (i + salt) % len(mrs)
		l[i] = piece{mrs[j], cur[j], m}
		cur[j] += m + 1 + (i*11+salt)%19
	}
	return l
}

// image is the expected content of the first bytes of some MRs.
type image struct {
	mrs  []*MR
	want [][]byte
}

// prepare fills each MR of mrs that l uses, up to mxGuard bytes past its
// last piece, with random bytes, and returns an image expecting them to stay.
func (e *mxEnv) prepare(mrs []*MR, l sgList) *image {
	im := &image{mrs: mrs, want: make([][]byte, len(mrs))}
	for j, mr := range mrs {
		end := -1
		for _, pc := range l {
			if pc.mr == mr {
				end = max(end, pc.off+pc.n)
			}
		}
		if end < 0 {
			continue
		}
		end = min(end+mxGuard, mr.Len())
		e.rng.Read(mr.Buf()[:end])
		im.want[j] = bytes.Clone(mr.Buf()[:end])
	}
	return im
}

// expect records that data lands in the pieces of l, in order.
func (im *image) expect(l sgList, data []byte) {
	for _, pc := range l {
		for j, mr := range im.mrs {
			if mr == pc.mr {
				data = data[copy(im.want[j][pc.off:pc.off+pc.n], data):]
				break
			}
		}
	}
}

// check compares the MRs with the image.
func (im *image) check(t testing.TB, what string) {
	t.Helper()
	for j, w := range im.want {
		got := im.mrs[j].Buf()[:len(w)]
		if !bytes.Equal(got, w) {
			i := 0
			for got[i] == w[i] {
				i++
			}
			t.Fatalf("%s: MR %d differs at byte %d of the %d checked: got %#02x, want %#02x", what, j, i, len(w), got[i], w[i])
		}
	}
}

// mxEnv is a connected pair with the memory the matrix cases use.
type mxEnv struct {
	p      *pair
	typ    QPType
	mtu    int
	la, lb []*MR // A's local buffers, B's receive buffers
	tgt    *MR   // B: the WRITE and atomics target
	ah     *AH   // UD: A's handle for B
	rng    *rand.ChaCha8
	n      int  // cases run: salts layouts, IDs and immediates
	broken bool // a case failed: the pair's state is unknown
}

func newMxEnv(t testing.TB, p *pair, typ QPType, mtu MTU, seed uint64) *mxEnv {
	t.Helper()
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	binary.LittleEndian.PutUint64(s[8:], uint64(mtu)<<8|uint64(typ))
	e := &mxEnv{p: p, typ: typ, mtu: mtu.Bytes(), rng: rand.NewChaCha8(s)}
	for range mxMRs {
		e.la = append(e.la, p.reg(p.pa, mxMRSize))
		e.lb = append(e.lb, p.reg(p.pb, mxMRSize))
	}
	if typ != UD {
		e.tgt = p.reg(p.pb, mxMRSize)
	} else {
		attr := AHAttr{DGID: p.db.GIDs()[0], PortNum: 1}
		if p.opts.ib != nil {
			attr = p.opts.ib.ah(p.db, 0)
		}
		ah, err := p.pa.CreateAH(attr)
		if err != nil {
			t.Fatal(err)
		}
		e.ah = ah
	}
	return e
}

// begin starts a case: it skips it if an earlier one broke the pair, and
// marks the pair broken if this one fails.
func (e *mxEnv) begin(t *testing.T) {
	if e.broken {
		t.Skip("an earlier case on this pair failed")
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.broken = true
		}
	})
}

func (e *mxEnv) postSend(t testing.TB, wrs ...SendWR) {
	t.Helper()
	if err := e.p.qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
}

func (e *mxEnv) postRecv(t testing.TB, wr RecvWR) {
	t.Helper()
	if err := e.p.qb.PostRecv([]RecvWR{wr}); err != nil {
		t.Fatal(err)
	}
}

// quiet fails if a completion nobody asked for is queued.
func (e *mxEnv) quiet(t testing.TB) {
	t.Helper()
	var wc [4]WC
	if n := e.p.ca.Poll(wc[:]); n > 0 {
		t.Fatalf("stray completions at A: %+v", wc[:n])
	}
	if n := e.p.cb.Poll(wc[:]); n > 0 {
		t.Fatalf("stray completions at B: %+v", wc[:n])
	}
}

// checkSendWC checks a requester completion; byteLen < 0 means not defined
// for the opcode (SEND and WRITE).
func (e *mxEnv) checkSendWC(t testing.TB, wc WC, id uint64, op WCOpcode, byteLen int) {
	t.Helper()
	if wc.WRID != id || wc.Status != Success || wc.Opcode != op || wc.QPNum != e.p.qa.QPN() ||
		(byteLen >= 0 && wc.ByteLen != uint32(byteLen)) || wc.Flags&WCGRH != 0 {
		t.Fatalf("send completion %+v, want wr_id %d, success, %v, qp %d, byte_len %d", wc, id, op, e.p.qa.QPN(), byteLen)
	}
}

// checkRecvWC checks a responder completion.
func (e *mxEnv) checkRecvWC(t testing.TB, wc WC, id uint64, op WCOpcode, byteLen int, flags WCFlags, imm uint32) {
	t.Helper()
	ok := wc.WRID == id && wc.Status == Success && wc.Opcode == op && wc.ByteLen == uint32(byteLen) &&
		wc.Flags == flags && wc.QPNum == e.p.qb.QPN() && wc.PKeyIndex == 0
	if flags&WCWithImm != 0 && wc.Imm != imm {
		ok = false
	}
	// src_qp is defined for UD only; for RC and UC it is 0 or the peer.
	if e.typ == UD && wc.SrcQP != e.p.qa.QPN() || wc.SrcQP != 0 && wc.SrcQP != e.p.qa.QPN() {
		ok = false
	}
	if e.typ == UD && e.p.opts.ib != nil && !e.p.opts.ib.checkWC(e.p, wc) {
		ok = false
	}
	if !ok {
		t.Fatalf("receive completion %+v, want wr_id %d, success, %v, byte_len %d, flags %#x, imm %#x, qp %d, src_qp %d",
			wc, id, op, byteLen, int(flags), imm, e.p.qb.QPN(), e.p.qa.QPN())
	}
}

// udRoCELen is the UDP payload length of a UD SEND of n bytes.
func udRoCELen(n int, imm bool) int {
	l := wire.BTHLen + wire.DETHLen + n + wire.PadFor(n) + wire.ICRCLen
	if imm {
		l += wire.ImmDtLen
	}
	return l
}

// checkGRH checks the 40-byte GRH area of a UD receive: for IPv4 twenty zero
// bytes and the IPv4 header (with a valid checksum), for IPv6 the IPv6
// header, with the packet's addresses and lengths.
func checkGRH(t testing.TB, g []byte, src, dst netip.Addr, roceLen int) {
	t.Helper()
	if len(g) != grhLen {
		t.Fatalf("GRH of %d bytes", len(g))
	}
	udpLen := 8 + roceLen
	if src.Is4() {
		if !bytes.Equal(g[:20], make([]byte, 20)) {
			t.Fatalf("GRH: first 20 bytes not zero for IPv4: % x", g[:20])
		}
		h := g[20:]
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(h[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		s, d := netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
		if h[0] != 0x45 || int(binary.BigEndian.Uint16(h[2:])) != 20+udpLen || h[9] != 17 || h[8] == 0 ||
			sum != 0xffff || s != src || d != dst {
			t.Fatalf("GRH: IPv4 header % x: want version 4, IHL 5, total length %d, UDP, TTL > 0, valid checksum (sum %#x), %v -> %v",
				h, 20+udpLen, sum, src, dst)
		}
		return
	}
	s, d := netip.AddrFrom16([16]byte(g[8:24])), netip.AddrFrom16([16]byte(g[24:40]))
	if g[0]>>4 != 6 || int(binary.BigEndian.Uint16(g[4:])) != udpLen || g[6] != 17 || g[7] == 0 ||
		s != src.WithZone("") || d != dst.WithZone("") {
		t.Fatalf("GRH: IPv6 header % x: want version 6, payload length %d, UDP, hop limit > 0, %v -> %v", g, udpLen, src, dst)
	}
}

// run runs one SEND, WRITE or READ case and checks everything it touched.
func (e *mxEnv) run(t *testing.T, op mop, size, nsge int) {
	t.Helper()
	e.n++
	salt := e.n
	id := uint64(e.n) << 4
	imm := uint32(0x5EED0000) ^ uint32(e.n)*0x9E3779B1
	msg := make([]byte, size)
	e.rng.Read(msg)
	p := e.p
	wr := SendWR{ID: id, Opcode: op.wr(), Flags: SendSignaled}
	if op.hasImm() {
		wr.Imm = imm
	}
	switch op {
	case opSend, opSendImm:
		src := layout(e.la, size, nsge, salt)
		src.put(msg)
		room := size + 13
		if e.typ == UD {
			room += grhLen
		}
		dst := layout(e.lb, room, nsge, salt+1)
		im := e.prepare(e.lb, dst)
		before := bytes.Clone(dst.get()[:min(grhLen, room)])
		e.postRecv(t, RecvWR{ID: id | 1, SGL: dst.sges()})
		wr.SGL = src.sges()
		if e.typ == UD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = e.ah, p.qb.QPN(), mxQKey
		}
		e.postSend(t, wr)
		e.checkSendWC(t, waitWC(t, p.ca, 1, mxWait)[0], id, WCSend, -1)
		rc := waitWC(t, p.cb, 1, mxWait)[0]
		want, flags := size, WCFlags(0)
		ibLocal := p.opts.ib != nil && !p.opts.ib.global
		if e.typ == UD {
			want, flags = grhLen+size, WCGRH
			if ibLocal {
				flags = 0
			}
		}
		if op.hasImm() {
			flags |= WCWithImm
		}
		e.checkRecvWC(t, rc, id|1, WCRecv, want, flags, imm)
		switch {
		case e.typ == UD && ibLocal:
			// No GRH came: the area is left as it was.
			msg = append(before, msg...)
		case e.typ == UD && p.opts.ib != nil:
			got := dst.get()[:grhLen]
			checkIBGRH(t, got, p.da.GIDs()[0], p.db.GIDs()[0], udRoCELen(size, op.hasImm()))
			msg = append(bytes.Clone(got), msg...)
		case e.typ == UD:
			got := dst.get()[:grhLen]
			checkGRH(t, got, p.da.GIDs()[0].Addr(), p.db.GIDs()[0].Addr(), udRoCELen(size, op.hasImm()))
			msg = append(bytes.Clone(got), msg...)
		}
		im.expect(dst, msg)
		im.check(t, "receive buffer")
	case opWrite, opWriteImm:
		src := layout(e.la, size, nsge, salt)
		src.put(msg)
		roff := 8 + salt%53
		dst := sgList{{e.tgt, roff, size}}
		im := e.prepare([]*MR{e.tgt}, dst)
		var rim *image
		if op.hasImm() {
			// The receive WQE's buffer must stay untouched.
			rl := layout(e.lb, 16, 1, salt)
			rim = e.prepare(e.lb, rl)
			e.postRecv(t, RecvWR{ID: id | 1, SGL: rl.sges()})
		}
		wr.SGL = src.sges()
		wr.RemoteAddr, wr.RKey = e.tgt.Addr()+uint64(roff), e.tgt.RKey()
		e.postSend(t, wr)
		e.checkSendWC(t, waitWC(t, p.ca, 1, mxWait)[0], id, WCRDMAWrite, -1)
		if op.hasImm() {
			rc := waitWC(t, p.cb, 1, mxWait)[0]
			e.checkRecvWC(t, rc, id|1, WCRecvRDMAWithImm, size, WCWithImm, imm)
			rim.check(t, "WRITE_WITH_IMM receive buffer")
		} else if e.typ == UC {
			e.syncUC(t, id|2)
		}
		im.expect(dst, msg)
		im.check(t, "WRITE target")
	case opRead:
		// A fresh source for every READ: a late duplicate READ request
		// re-reads it, so the test must never write it again.
		srcMR := p.reg(p.pb, size+64)
		roff := 1 + salt%31
		copy(srcMR.Buf()[roff:], msg)
		dst := layout(e.la, size, nsge, salt)
		im := e.prepare(e.la, dst)
		wr.SGL = dst.sges()
		wr.RemoteAddr, wr.RKey = srcMR.Addr()+uint64(roff), srcMR.RKey()
		e.postSend(t, wr)
		e.checkSendWC(t, waitWC(t, p.ca, 1, mxWait)[0], id, WCRDMARead, size)
		im.expect(dst, msg)
		im.check(t, "READ destination")
	default:
		t.Fatalf("run: %v", op)
	}
	e.quiet(t)
}

// syncUC waits until B has processed everything A sent before: UC WRITE
// completes at the requester when sent, so a zero-byte SEND behind it marks
// when B is done (loop keeps order without faults).
func (e *mxEnv) syncUC(t testing.TB, id uint64) {
	t.Helper()
	e.postRecv(t, RecvWR{ID: id})
	e.postSend(t, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled})
	e.checkSendWC(t, waitWC(t, e.p.ca, 1, mxWait)[0], id, WCSend, -1)
	e.checkRecvWC(t, waitWC(t, e.p.cb, 1, mxWait)[0], id, WCRecv, 0, 0, 0)
}

// runAtomic posts two atomics on one 8-byte target: CAS that matches then
// one that does not, or two FETCH_AND_ADDs; each returns the original value
// into an unaligned local buffer.
func (e *mxEnv) runAtomic(t *testing.T, op mop) {
	e.n++
	salt := e.n
	id := uint64(e.n) << 4
	p := e.p
	roff := 8 * (1 + salt%100)
	tl := sgList{{e.tgt, roff, 8}}
	tim := e.prepare([]*MR{e.tgt}, tl)
	v0 := binary.NativeEndian.Uint64(e.tgt.Buf()[roff:])
	loc := sgList{{e.la[1], 5 + salt%3, 8}, {e.la[1], 27 + salt%5, 8}}
	lim := e.prepare(e.la, loc)
	a, b := e.rng.Uint64(), e.rng.Uint64()
	wrs := []SendWR{
		{ID: id, Opcode: op.wr(), Flags: SendSignaled, SGL: loc[:1].sges(), RemoteAddr: e.tgt.Addr() + uint64(roff), RKey: e.tgt.RKey()},
		{ID: id + 1, Opcode: op.wr(), Flags: SendSignaled, SGL: loc[1:].sges(), RemoteAddr: e.tgt.Addr() + uint64(roff), RKey: e.tgt.RKey()},
	}
	var orig1, orig2, final uint64
	wcop := WCCompSwap
	if op == opCAS {
		wrs[0].CompareAdd, wrs[0].Swap = v0, a   // matches: v0 -> a
		wrs[1].CompareAdd, wrs[1].Swap = v0^1, b // does not match a
		orig1, orig2, final = v0, a, a
	} else {
		wcop = WCFetchAdd
		wrs[0].CompareAdd, wrs[1].CompareAdd = a, b
		orig1, orig2, final = v0, v0+a, v0+a+b
	}
	e.postSend(t, wrs...)
	wc := waitWC(t, p.ca, 2, mxWait)
	e.checkSendWC(t, wc[0], id, wcop, 8)
	e.checkSendWC(t, wc[1], id+1, wcop, 8)
	var ob [16]byte
	binary.NativeEndian.PutUint64(ob[:], orig1)
	binary.NativeEndian.PutUint64(ob[8:], orig2)
	lim.expect(loc, ob[:])
	lim.check(t, "atomic results")
	binary.NativeEndian.PutUint64(ob[:], final)
	tim.expect(tl, ob[:8])
	tim.check(t, "atomic target")
	e.quiet(t)
}

// mxConfig selects a part of the matrix and the network it runs on.
type mxConfig struct {
	types   []QPType
	mtus    []MTU
	faults  loop.Faults
	seed    uint64
	timeout uint8   // RC local ACK timeout (0: newPair's default)
	queue   int     // loop's receive queue bound (0: its default)
	ib      *ibOpts // over an InfiniBand cable instead of loop (ibport_test.go)
	// bigSGE, if set, is the one SGE count 1 MiB messages are tried with
	// (to bound the run time on faulty networks).
	bigSGE int
}

func runMatrix(t *testing.T, c mxConfig) {
	for _, typ := range c.types {
		t.Run(typ.String(), func(t *testing.T) {
			for _, mtu := range c.mtus {
				t.Run("MTU"+mtu.String(), func(t *testing.T) {
					t.Parallel()
					p := newPair(t, pairOpts{typ: typ, mtu: mtu, sge: MaxSGE, faults: c.faults,
						seed: c.seed + uint64(mtu), timeout: c.timeout, queue: c.queue, ib: c.ib})
					e := newMxEnv(t, p, typ, mtu, c.seed)
					for _, op := range opsOf(typ) {
						t.Run(op.String(), func(t *testing.T) {
							if op == opCAS || op == opFAA {
								e.begin(t)
								e.runAtomic(t, op)
								return
							}
							for _, size := range sizesOf(typ, mtu.Bytes()) {
								t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
									for _, k := range sgeCounts {
										if size == 1<<20 && c.bigSGE != 0 && k != c.bigSGE {
											continue
										}
										t.Run(fmt.Sprintf("sge=%d", k), func(t *testing.T) {
											e.begin(t)
											e.run(t, op, size, k)
										})
									}
								})
							}
						})
					}
					for _, qp := range []*QP{p.qa, p.qb} {
						if s := qp.State(); s != StateRTS {
							t.Errorf("QP %d ends in state %v", qp.QPN(), s)
						}
					}
					if p.net != nil && p.net.Stats().Sent > 0 && c.seed >= 100 {
						t.Logf("faults: %+v", p.net.Stats())
					}
				})
			}
		})
	}
}

// TestMatrix runs every operation of RC, UC and UD at path MTUs 256, 1024
// and 4096 with messages of 0, 1, MTU-1, MTU, MTU+1 bytes and 1 MiB (UD up
// to the MTU) split over 1, 2 and 32 SGEs in three MRs, on a clean network.
func TestMatrix(t *testing.T) {
	leakcheck.Check(t)
	runMatrix(t, mxConfig{types: []QPType{RC, UC, UD}, mtus: []MTU{MTU256, MTU1024, MTU4096}, seed: 1,
		queue: 1 << 14}) // UC sends 1 MiB at MTU 256 (4096 packets) at once
}

// TestMatrixLossy runs the RC matrix with 10% loss, 5% duplication and 5%
// reordering: every WR must complete successfully with intact data.
func TestMatrixLossy(t *testing.T) {
	leakcheck.Check(t)
	runMatrix(t, mxConfig{types: []QPType{RC}, mtus: []MTU{MTU256, MTU1024, MTU4096}, seed: 100, timeout: 12, bigSGE: 2,
		faults: loop.Faults{Loss: 0.1, Duplicate: 0.05, Reorder: 0.05}})
}

// TestMatrixCorrupt runs the RC matrix at MTU 1024 with 5% of the packets
// corrupted; the receiving link's ICRC check drops them.
func TestMatrixCorrupt(t *testing.T) {
	leakcheck.Check(t)
	runMatrix(t, mxConfig{types: []QPType{RC}, mtus: []MTU{MTU1024}, seed: 200, timeout: 12, bigSGE: 2,
		faults: loop.Faults{Corrupt: 0.05}})
}

// TestMatrixJitter runs the RC matrix at MTU 1024 with a random extra delay
// per packet, which reorders them as a real network would.
func TestMatrixJitter(t *testing.T) {
	leakcheck.Check(t)
	runMatrix(t, mxConfig{types: []QPType{RC}, mtus: []MTU{MTU1024}, seed: 300, timeout: 12, bigSGE: 2,
		faults: loop.Faults{Delay: 20 * time.Microsecond, Jitter: 100 * time.Microsecond}})
}

// TestUCLoss sends UC messages of 1 to 4 packets through a network that
// drops 10% of the packets. A message that loses a packet is dropped whole;
// a receive WQE a dropped SEND had begun to fill is reused for the next
// message, so the k-th receive completion uses the k-th posted WQE and holds
// exactly the k-th surviving message. The requester completes every WR
// successfully all the same.
func TestUCLoss(t *testing.T) {
	leakcheck.Check(t)
	for _, op := range []mop{opSend, opWriteImm} {
		t.Run(op.String(), func(t *testing.T) {
			const n = 200
			const marker = 0xFFFFFFFF
			p := newPair(t, pairOpts{typ: UC, mtu: MTU1024, wr: 256, sge: 2})
			// The loss is drawn here, not by loop.Faults.Loss, to know which
			// packets went missing. Only A sends, so the order is the send order.
			var mu sync.Mutex
			var lost []bool
			rng := rand.New(rand.NewPCG(42, uint64(op)))
			p.net.SetFaults(loop.Faults{Filter: func(*link.Packet) bool {
				mu.Lock()
				defer mu.Unlock()
				drop := rng.Float64() < 0.1
				lost = append(lost, drop)
				return drop
			}})
			size := func(i int) int { return 8 + (i*977)%3500 }
			msgOf := func(i int) []byte {
				b := make([]byte, size(i))
				r := rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), byte(op)})
				r.Read(b)
				binary.LittleEndian.PutUint32(b, uint32(i))
				return b
			}
			ma := p.reg(p.pa, (n+1)*4096)
			mb1, mb2 := p.reg(p.pb, (n+1)*1024), p.reg(p.pb, (n+1)*3072)
			tgt := p.reg(p.pb, n*4096)
			var recvs []RecvWR
			for k := range n + 1 {
				recvs = append(recvs, RecvWR{ID: uint64(k), SGL: []SGE{mb1.SGE(k*1024, 1024), mb2.SGE(k*3072, 3072)}})
			}
			if err := p.qb.PostRecv(recvs); err != nil {
				t.Fatal(err)
			}
			var wrs []SendWR
			for i := range n {
				m := msgOf(i)
				copy(ma.Buf()[i*4096:], m)
				wr := SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(i*4096, len(m))}}
				switch {
				case op == opWriteImm:
					wr.Opcode, wr.Imm, wr.RemoteAddr, wr.RKey = WRRDMAWriteWithImm, uint32(i), tgt.Addr()+uint64(i*4096), tgt.RKey()
				case i%2 == 0:
					wr.Opcode, wr.Imm = WRSendWithImm, uint32(i)
				}
				wrs = append(wrs, wr)
			}
			if err := p.qa.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			for i, wc := range waitWC(t, p.ca, n, mxWait) {
				want := WCSend
				if op == opWriteImm {
					want = WCRDMAWrite
				}
				if wc.WRID != uint64(i) || wc.Status != Success || wc.Opcode != want {
					t.Fatalf("send completion %d: %+v", i, wc)
				}
			}
			// Which messages arrived whole?
			mu.Lock()
			var survivors []int
			pk := 0
			for i := range n {
				np := packetsFor(size(i), 1024)
				ok := true
				for _, l := range lost[pk : pk+np] {
					ok = ok && !l
				}
				pk += np
				if ok {
					survivors = append(survivors, i)
				}
			}
			if pk != len(lost) {
				t.Fatalf("%d packets went through the network, want %d", len(lost), pk)
			}
			mu.Unlock()
			if len(survivors) == n || len(survivors) < n/2 {
				t.Fatalf("%d of %d messages survived: the loss is not doing its job", len(survivors), n)
			}
			// A last message on a clean network: every survivor is in
			// before it.
			p.net.SetFaults(loop.Faults{})
			copy(ma.Buf()[n*4096:], "marker!!")
			if err := p.qa.PostSend([]SendWR{{ID: marker, Opcode: WRSendWithImm, Imm: marker, Flags: SendSignaled,
				SGL: []SGE{ma.SGE(n*4096, 8)}}}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, p.ca, 1, mxWait)[0]; wc.WRID != marker || wc.Status != Success {
				t.Fatalf("marker send completion %+v", wc)
			}
			got := waitWC(t, p.cb, len(survivors)+1, mxWait)
			for k, wc := range got[:len(survivors)] {
				i := survivors[k]
				m := msgOf(i)
				if wc.WRID != uint64(k) || wc.Status != Success || wc.ByteLen != uint32(len(m)) || wc.SrcQP != 0 && wc.SrcQP != p.qa.QPN() {
					t.Fatalf("receive completion %d (message %d of %d bytes): %+v", k, i, len(m), wc)
				}
				var data []byte
				if op == opWriteImm {
					if wc.Opcode != WCRecvRDMAWithImm || wc.Flags != WCWithImm || wc.Imm != uint32(i) {
						t.Fatalf("receive completion %d: %+v, want RECV_RDMA_WITH_IMM of message %d", k, wc, i)
					}
					data = tgt.Buf()[i*4096 : i*4096+len(m)]
				} else {
					wantFlags := WCFlags(0)
					if i%2 == 0 {
						wantFlags = WCWithImm
					}
					if wc.Opcode != WCRecv || wc.Flags != wantFlags || wantFlags != 0 && wc.Imm != uint32(i) {
						t.Fatalf("receive completion %d: %+v, want RECV of message %d", k, wc, i)
					}
					buf := append(bytes.Clone(mb1.Buf()[k*1024:(k+1)*1024]), mb2.Buf()[k*3072:(k+1)*3072]...)
					data = buf[:len(m)]
				}
				if !bytes.Equal(data, m) {
					t.Fatalf("receive completion %d: message %d corrupted (starts with message %d)", k, i,
						binary.LittleEndian.Uint32(data))
				}
			}
			// The marker used the next WQE: dropped messages consumed none.
			if wc := got[len(survivors)]; wc.WRID != uint64(len(survivors)) || wc.Status != Success ||
				wc.Imm != marker || wc.ByteLen != 8 {
				t.Fatalf("marker receive completion %+v, want wr_id %d (one WQE per surviving message)", wc, len(survivors))
			}
			if s := p.db.Stats().RxOutOfSeq.Load(); s == 0 {
				t.Errorf("no out-of-sequence packets counted at B")
			}
			t.Logf("%d of %d messages survived %d lost packets", len(survivors), n, count(lost))
		})
	}
}

func count(b []bool) int {
	n := 0
	for _, x := range b {
		if x {
			n++
		}
	}
	return n
}

// raceEnabled reports whether the test binary was built with -race, under
// which sync.Pool drops items at random, so pooled packets get allocated.
func raceEnabled() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
}

// stubLink is a link for allocation tests: Send copies packets into spare
// buffers queued for the peer, and pump delivers them on the caller's
// goroutine, so nothing but the engine runs and nothing is allocated once
// the spares and queues have grown.
type stubLink struct {
	addr  netip.Addr
	peer  *stubLink
	h     link.Handler
	mu    sync.Mutex
	in    []*link.Packet // queued for delivery to this link
	spare []*link.Packet
	batch []*link.Packet
}

func newStubLinks() (*stubLink, *stubLink) {
	a := &stubLink{addr: netip.MustParseAddr("10.0.0.1")}
	b := &stubLink{addr: netip.MustParseAddr("10.0.0.2"), peer: a}
	a.peer = b
	return a, b
}

func (l *stubLink) Addrs() []netip.Addr        { return []netip.Addr{l.addr} }
func (l *stubLink) Port() uint16               { return link.DefaultPort }
func (l *stubLink) Stats() link.Stats          { return link.Stats{} }
func (l *stubLink) Close() error               { return nil }
func (l *stubLink) Start(h link.Handler) error { l.h = h; return nil }

func (l *stubLink) Send(batch []*link.Packet) error {
	q := l.peer
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range batch {
		var c *link.Packet
		if n := len(q.spare); n > 0 {
			c, q.spare = q.spare[n-1], q.spare[:n-1]
		} else {
			c = &link.Packet{Buf: make([]byte, link.BufSize)}
		}
		c.N = copy(c.Buf, p.Data())
		c.Src = netip.AddrPortFrom(l.addr, link.DefaultPort)
		c.Dst = netip.AddrPortFrom(q.addr, link.DefaultPort)
		q.in = append(q.in, c)
	}
	return nil
}

// pump delivers the packets queued for l and reports how many there were.
func (l *stubLink) pump() int {
	l.mu.Lock()
	l.batch = append(l.batch[:0], l.in...)
	clear(l.in)
	l.in = l.in[:0]
	l.mu.Unlock()
	n := len(l.batch)
	if n > 0 {
		l.h.Receive(l.batch)
	}
	l.mu.Lock()
	l.spare = append(l.spare, l.batch...)
	l.mu.Unlock()
	clear(l.batch)
	return n
}

// allocPair returns a connected RC pair on stub links ("stub") or on loop.
// Called in a synctest bubble whose test goroutine never blocks, it sees
// time stand still, so no timer fires or is re-armed.
func allocPair(t *testing.T, kind string) (*pair, func() int) {
	opts := &Options{}
	if kind == "loop" {
		_, da, db := newDevicesLoop(t, &pairOpts{devOpts: opts})
		p := &pair{t: t, da: da, db: db}
		p.connect(pairOpts{mtu: MTU1024, wr: 64})
		return p, func() int { runtime.Gosched(); return 0 }
	}
	la, lb := newStubLinks()
	da, err := Open(la, opts)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(lb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	p := &pair{t: t, da: da, db: db}
	p.connect(pairOpts{mtu: MTU1024, wr: 64})
	return p, func() int { return la.pump() + lb.pump() }
}

// TestHotPathAllocs checks that posting a batch of SENDs and WRITEs, moving
// their packets and ACKs and polling the completions allocates nothing once
// warm: on stub links (the engine alone) and through link/loop.
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled() {
		t.Skip("sync.Pool drops items under the race detector")
	}
	for _, kind := range []string{"stub", "loop"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, pump := allocPair(t, kind)
				ma, mb := p.reg(p.pa, 1<<20), p.reg(p.pb, 1<<20)
				const nSend, nWrite = 8, 8
				var wrs []SendWR
				var recvs []RecvWR
				for i := range nSend {
					wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(i*4096, 1500), ma.SGE(i*4096+2000, 100)}})
					recvs = append(recvs, RecvWR{ID: uint64(i), SGL: []SGE{mb.SGE(i*4096, 4096)}})
				}
				for i := range nWrite {
					wrs = append(wrs, SendWR{ID: uint64(nSend + i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(65536+i*4096, 3000)},
						RemoteAddr: mb.Addr() + 65536 + uint64(i*4096), RKey: mb.RKey()})
				}
				// FLUSH and ATOMIC_WRITE (flush.go) on the hot path too.
				wrs = append(wrs, atomicWR(100, mb, 8, 5), flushWR(101, mb, 65536, 4096, FlushGlobal, FlushRange))
				wc := make([]WC, 32)
				var failed string
				round := func() {
					if err := p.qb.PostRecv(recvs); err != nil {
						failed = err.Error()
						return
					}
					if err := p.qa.PostSend(wrs); err != nil {
						failed = err.Error()
						return
					}
					gotA, gotB := 0, 0
					for spins := 0; gotA < len(wrs) || gotB < nSend; spins++ {
						pump()
						k := p.ca.Poll(wc)
						for _, w := range wc[:k] {
							if w.Status != Success {
								failed = w.Status.String()
							}
						}
						gotA += k
						gotB += p.cb.Poll(wc)
						if spins > 10_000_000 { // time stands still in the bubble
							failed = "no completions after 10,000,000 polls"
							return
						}
					}
				}
				for range 20 { // warm up pools, queues and slices
					round()
				}
				allocs := testing.AllocsPerRun(200, round)
				if failed != "" {
					t.Fatal(failed)
				}
				if allocs != 0 {
					t.Errorf("%v allocations per batch of %d WRs (%d packets each way), want 0", allocs, len(wrs), nSend*2+nWrite*3)
				}
			})
		})
	}
}

// TestPollAllocs checks that CQ.Poll allocates nothing, empty or not.
func TestPollAllocs(t *testing.T) {
	p := newPair(t, pairOpts{})
	wc := make([]WC, 8)
	if a := testing.AllocsPerRun(1000, func() { p.ca.Poll(wc) }); a != 0 {
		t.Errorf("Poll of an empty CQ: %v allocations", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		for i := range 4 {
			p.ca.push(&WC{WRID: uint64(i)}, false)
		}
		if p.ca.Poll(wc) != 4 {
			panic("lost completions")
		}
	}); a != 0 {
		t.Errorf("Poll of 4 completions: %v allocations", a)
	}
}

// TestRCLossyPipeline posts a mix of every RC operation at once, so READs
// and atomics are outstanding together with SENDs and WRITEs before and
// after them, through loss with duplication and reordering, corruption, and
// jitter; every WR must complete successfully, in order, with intact data.
func TestRCLossyPipeline(t *testing.T) {
	leakcheck.Check(t)
	for _, c := range []struct {
		profile string // in stressProfiles
		seeds   []uint64
	}{
		{"loss", []uint64{1, 2, 3}},
		{"corrupt", []uint64{1, 2, 3}},
		{"jitter", []uint64{1, 2, 3, 63}},
		// Seeds that ended a READ in RETRY_EXC_ERR in the stress harness
		// before the READ retry fixes (retry_test.go has deterministic
		// versions of each cause).
		{"loss20", []uint64{74, 141, 206, 289}},
		{"loss20j", []uint64{300}},
	} {
		for _, seed := range c.seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", c.profile, seed), func(t *testing.T) {
				t.Parallel()
				// In a bubble the loop network's delays and jitter,
				// and every timer, run on fake time.
				synctest.Test(t, func(t *testing.T) { runPipeline(t, stressProfiles[c.profile], seed) })
			})
		}
	}
}

// runPipeline is TestRCLossyPipeline on one network. It returns what the
// network did, for the stress harness's amplification figures.
func runPipeline(t *testing.T, faults loop.Faults, seed uint64) loop.FaultStats {
	const nwr = 48
	psns := newPSNChecker()
	faults.Filter = psns.filter
	var trace *pipeTrace
	if os.Getenv("SOFTRDMA_STRESS_TRACE") != "" {
		trace = newPipeTrace(seed, faults.Loss, 300)
		faults.Loss = 0
		faults.Filter = func(p *link.Packet) bool { psns.filter(p); return trace.filter(p) }
	}
	p := newPair(t, pairOpts{typ: RC, mtu: MTU1024, wr: 64, sge: 2, timeout: 12, retry: stressRetry, seed: seed, faults: faults})
	defer func() {
		psns.check(t)
		checkReplayTable(t, p.qb)
		if trace != nil && t.Failed() {
			trace.log(t, p.qa, p.qb.qpn, 300)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 99))
	const slot = 320 << 10
	ma := p.reg(p.pa, nwr*slot) // sources, READ destinations, atomic results
	mb := p.reg(p.pb, nwr*slot) // receive buffers, WRITE targets, READ sources, atomic targets
	ops := []mop{opSend, opWrite, opRead, opSendImm, opCAS, opWriteImm, opRead, opFAA}
	sizes := []int{0, 1, 1000, 1024, 1025, 5000, 70000, 300000, 2048}
	type want struct {
		op        mop
		n         int
		dst       []byte // where the data must end up
		data      []byte
		orig, fin uint64 // atomics: the value returned and the final one
	}
	var wrs []SendWR
	var recvs []RecvWR
	var wants []want
	for i := range nwr {
		op := ops[i%len(ops)]
		n := sizes[i%len(sizes)]
		off := i * slot
		w := want{op: op, n: n}
		wr := SendWR{ID: uint64(i), Opcode: op.wr(), Flags: SendSignaled, Imm: uint32(i) * 7}
		switch op {
		case opSend, opSendImm, opWrite, opWriteImm:
			w.data = make([]byte, n)
			for j := range w.data {
				w.data[j] = byte(rng.Uint32())
			}
			copy(ma.Buf()[off:], w.data)
			// Two SGEs, the second one starting at an odd offset.
			h := n / 3
			wr.SGL = []SGE{ma.SGE(off, h), ma.SGE(off+h+7, n-h)}
			copy(ma.Buf()[off+h+7:], w.data[h:])
			w.dst = mb.Buf()[off : off+n]
			if op == opWrite || op == opWriteImm {
				wr.RemoteAddr, wr.RKey = mb.Addr()+uint64(off), mb.RKey()
			}
			if op != opWrite {
				recvs = append(recvs, RecvWR{ID: uint64(i), SGL: []SGE{mb.SGE(off, n+16)}})
			}
		case opRead:
			w.data = make([]byte, n)
			for j := range w.data {
				w.data[j] = byte(rng.Uint32())
			}
			copy(mb.Buf()[off:], w.data)
			wr.SGL = []SGE{ma.SGE(off, n)}
			wr.RemoteAddr, wr.RKey = mb.Addr()+uint64(off), mb.RKey()
			w.dst = ma.Buf()[off : off+n]
		case opCAS, opFAA:
			v0, a := rng.Uint64(), rng.Uint64()
			binary.NativeEndian.PutUint64(mb.Buf()[off:], v0)
			wr.SGL = []SGE{ma.SGE(off+3, 8)}
			wr.RemoteAddr, wr.RKey = mb.Addr()+uint64(off), mb.RKey()
			w.orig, w.fin = v0, v0+a
			wr.CompareAdd = a
			if op == opCAS {
				wr.CompareAdd, wr.Swap = v0, a
				w.fin = a
			}
		}
		wrs = append(wrs, wr)
		wants = append(wants, w)
	}
	if err := p.qb.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	if err := p.qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, wc := range waitWC(t, p.ca, nwr, mxWait) {
		if wc.WRID != uint64(i) || wc.Status != Success || wc.Opcode != wrInfoOf(wrs[i].Opcode).wc {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	rc := waitWC(t, p.cb, len(recvs), mxWait)
	for k, wc := range rc {
		i := int(recvs[k].ID)
		w := wants[i]
		op, flags := WCRecv, WCFlags(0)
		if w.op == opWriteImm {
			op = WCRecvRDMAWithImm
		}
		if w.op.hasImm() {
			flags = WCWithImm
		}
		if wc.WRID != uint64(i) || wc.Status != Success || wc.Opcode != op || wc.ByteLen != uint32(w.n) ||
			wc.Flags != flags || flags != 0 && wc.Imm != uint32(i)*7 {
			t.Fatalf("receive completion %d (WR %d, %v of %d bytes): %+v", k, i, w.op, w.n, wc)
		}
	}
	for i, w := range wants {
		off := i * slot
		switch w.op {
		case opCAS, opFAA:
			got := binary.NativeEndian.Uint64(ma.Buf()[off+3:])
			fin := binary.NativeEndian.Uint64(mb.Buf()[off:])
			if got != w.orig || fin != w.fin {
				t.Errorf("WR %d %v: returned %#x, target %#x; want %#x, %#x", i, w.op, got, fin, w.orig, w.fin)
			}
		default:
			if !bytes.Equal(w.dst, w.data) {
				t.Errorf("WR %d %v of %d bytes: data differs", i, w.op, w.n)
			}
		}
	}
	s := p.net.Stats()
	if s.Lost+s.Corrupted+s.Delayed == 0 && faults.Loss+faults.Corrupt+float64(faults.Delay+faults.Jitter) > 0 {
		t.Errorf("the faults did not happen: %+v", s)
	}
	return s
}
