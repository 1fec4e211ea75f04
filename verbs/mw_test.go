package verbs

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// mwNets are the networks every memory-window scenario runs over: the
// in-process link clean and with seeded faults, and real UDP sockets.
var mwNets = []struct {
	name string
	mk   func(t *testing.T) *pair
}{
	{"loop", func(t *testing.T) *pair { return newPair(t, pairOpts{}) }},
	{"lossy", func(t *testing.T) *pair {
		p := newPair(t, pairOpts{faults: loop.Faults{Loss: 0.2, Duplicate: 0.1, Reorder: 0.1}, seed: 11, timeout: 8})
		t.Cleanup(func() {
			// The scenario must have met faults to prove anything.
			if st := p.net.Stats(); st.Lost == 0 && !t.Failed() {
				t.Errorf("no packet lost: %+v", st)
			}
		})
		return p
	}},
	{"udp", func(t *testing.T) *pair {
		da, db := newDevicesUDP(t, false)
		p := &pair{t: t, da: da, db: db}
		p.connect(pairOpts{typ: RC, timeout: 14})
		return p
	}},
}

func forMWNets(t *testing.T, f func(t *testing.T, p *pair)) {
	for _, n := range mwNets {
		t.Run(n.name, func(t *testing.T) { f(t, n.mk(t)) })
	}
}

// forCleanNets runs f over the clean networks only (link/loop and UDP):
// for scenarios that fail QPs on purpose, where a lost NAK would end in
// RETRY_EXC_ERR instead of the status under test.
func forCleanNets(t *testing.T, f func(t *testing.T, p *pair)) {
	for _, n := range mwNets {
		if n.name != "lossy" {
			t.Run(n.name, func(t *testing.T) { f(t, n.mk(t)) })
		}
	}
}

// calm stops a loop network's faults (keeping its Filter) before a step that
// fails the QPs: a responder in the error state answers nothing, so a lost
// NAK would end in RETRY_EXC_ERR instead of the status under test.
func (p *pair) calm() {
	if p.net != nil {
		p.net.SetFaults(loop.Faults{Filter: p.net.Faults().Filter})
	}
}

// regBind registers n bytes that windows may be bound to.
func regBind(t *testing.T, pd *PD, n int, acc Access) *MR {
	t.Helper()
	mr, err := pd.RegMR(make([]byte, n), acc|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

func allocMW(t *testing.T, pd *PD, typ MWType) *MW {
	t.Helper()
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func oneWC(t *testing.T, cq *CQ) WC {
	t.Helper()
	return waitWC(t, cq, 1, waitFor)[0]
}

func wantWC(t *testing.T, wc WC, id uint64, op WCOpcode, st Status) {
	t.Helper()
	if wc.WRID != id || wc.Opcode != op || wc.Status != st {
		t.Fatalf("completion %+v, want WR %d %v %v", wc, id, op, st)
	}
}

// TestMWType1: a type 1 window bound by the bind call gives a peer WRITE
// and READ access to its part of the region and nothing else; the region
// cannot be deregistered while it is bound; a zero-length bind unbinds it
// and changes its key, and the old key then fails with REM_ACCESS_ERR.
func TestMWType1(t *testing.T) {
	forMWNets(t, func(t *testing.T, p *pair) {
		mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		mw := allocMW(t, p.pb, MWType1)
		k0 := mw.RKey()
		base := mr.Addr() + 1024
		key, err := p.qb.BindMW(mw, MWBind{ID: 1, Flags: SendSignaled,
			Info: MWBindInfo{MR: mr, Addr: base, Length: 512, Access: AccessRemoteWrite | AccessRemoteRead}})
		if err != nil {
			t.Fatal(err)
		}
		if key>>8 != k0>>8 || key&0xff != (k0+1)&0xff {
			t.Fatalf("bound key %#x, allocated %#x: want the next key byte", key, k0)
		}
		wantWC(t, oneWC(t, p.cb), 1, WCBindMW, Success)
		if mw.RKey() != key {
			t.Fatalf("RKey() %#x after the bind, want %#x", mw.RKey(), key)
		}
		if err := mr.Dereg(); !errors.Is(err, ErrBusy) {
			t.Fatalf("Dereg with a window bound: %v", err)
		}

		local := p.reg(p.pa, 4096)
		copy(local.Buf(), bytes.Repeat([]byte{0x5A}, 512))
		post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 512)}, RemoteAddr: base, RKey: key})
		wantWC(t, oneWC(t, p.ca), 2, WCRDMAWrite, Success)
		if !bytes.Equal(mr.Buf()[1024:1536], local.Buf()[:512]) || mr.Buf()[1023] != 0 || mr.Buf()[1536] != 0 {
			t.Fatal("WRITE through the window: wrong bytes in the region")
		}
		mr.Buf()[1100] = 0xC3
		post(t, p.qa, SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{local.SGE(1024, 100)}, RemoteAddr: base + 50, RKey: key})
		wantWC(t, oneWC(t, p.ca), 3, WCRDMARead, Success)
		if local.Buf()[1024+26] != 0xC3 {
			t.Fatal("READ through the window: wrong bytes")
		}

		// Unbind (zero length): a new key, and the region is free again.
		k2, err := p.qb.BindMW(mw, MWBind{ID: 4, Flags: SendSignaled})
		if err != nil {
			t.Fatal(err)
		}
		wantWC(t, oneWC(t, p.cb), 4, WCBindMW, Success)
		if k2 == key || k2>>8 != key>>8 {
			t.Fatalf("key after unbind %#x, before %#x", k2, key)
		}
		// The old key no longer works.
		p.calm()
		post(t, p.qa, SendWR{ID: 5, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 8)}, RemoteAddr: base, RKey: key})
		wantWC(t, oneWC(t, p.ca), 5, WCRDMAWrite, RemAccessErr)
		if err := mw.Dealloc(); err != nil {
			t.Fatal(err)
		}
		if err := mr.Dereg(); err != nil {
			t.Fatalf("Dereg after unbind: %v", err)
		}
	})
}

// TestMWWindowRange: the window's range and rights are checked, not only
// the region's: a WRITE past the window's end (inside the region) and a
// WRITE through a read-only window both fail with REM_ACCESS_ERR.
func TestMWWindowRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		access Access
		off    uint64
	}{
		{"past the end", AccessRemoteWrite, 250},
		{"read-only window", AccessRemoteRead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forCleanNets(t, func(t *testing.T, p *pair) {
				mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
				mw := allocMW(t, p.pb, MWType1)
				key, err := p.qb.BindMW(mw, MWBind{ID: 1, Info: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 256, Access: tc.access}})
				if err != nil {
					t.Fatal(err)
				}
				local := p.reg(p.pa, 64)
				post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 16)}, RemoteAddr: mr.Addr() + tc.off, RKey: key})
				wantWC(t, oneWC(t, p.ca), 2, WCRDMAWrite, RemAccessErr)
			})
		})
	}
}

// invTap records the R_Key of every SEND_WITH_INV packet the network
// carries, decoded by the project's parser.
type invTap struct {
	mu   sync.Mutex
	keys []wire.RKey
	ops  []wire.Opcode
}

func (p *pair) tapInv() *invTap {
	it := &invTap{}
	f := p.net.Faults()
	f.Filter = func(lp *link.Packet) bool {
		pkt, err := wire.Parse(lp.Data())
		if err != nil {
			return false
		}
		if k, ok := pkt.InvRKey(); ok {
			it.mu.Lock()
			it.keys, it.ops = append(it.keys, k), append(it.ops, pkt.Opcode())
			it.mu.Unlock()
		}
		return false
	}
	p.net.SetFaults(f)
	return it
}

// TestMWType2: a type 2 window bound by a BIND_MW work request with the
// key byte the request gives; SEND_WITH_INV from the peer invalidates it
// (the receive completion has WITH_INV and the key) and frees it for
// another bind; LOCAL_INV invalidates it again; the invalidated key fails
// with REM_ACCESS_ERR.
func TestMWType2(t *testing.T) {
	forMWNets(t, func(t *testing.T, p *pair) {
		var tap *invTap
		if p.net != nil {
			tap = p.tapInv()
		}
		mr := regBind(t, p.pb, 8192, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		mw := allocMW(t, p.pb, MWType2)
		key := nextKey(mw.RKey())
		post(t, p.qb, SendWR{ID: 1, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: key,
			Bind: MWBindInfo{MR: mr, Addr: mr.Addr() + 4096, Length: 4096, Access: AccessRemoteWrite | AccessZeroBased}})
		wantWC(t, oneWC(t, p.cb), 1, WCBindMW, Success)
		if mw.RKey() != key {
			t.Fatalf("RKey() %#x, want %#x", mw.RKey(), key)
		}
		local := p.reg(p.pa, 4096)
		copy(local.Buf(), "zero-based window")
		// Zero-based: address 0 is the window's first byte.
		post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 17)}, RemoteAddr: 0, RKey: key})
		wantWC(t, oneWC(t, p.ca), 2, WCRDMAWrite, Success)
		if string(mr.Buf()[4096:4096+17]) != "zero-based window" {
			t.Fatalf("region holds %q", mr.Buf()[4096:4096+17])
		}

		// SEND_WITH_INV: two packets (the IETH on the last) with a
		// receive completion flagged WITH_INV.
		recv := p.reg(p.pb, 4096)
		if err := p.qb.PostRecv([]RecvWR{{ID: 3, SGL: []SGE{recv.SGE(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
		post(t, p.qa, SendWR{ID: 4, Opcode: WRSendWithInv, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 1500)}, InvRKey: key})
		wantWC(t, oneWC(t, p.ca), 4, WCSend, Success)
		wc := oneWC(t, p.cb)
		wantWC(t, wc, 3, WCRecv, Success)
		if wc.Flags&WCWithInv == 0 || wc.InvalidatedRKey != key || wc.ByteLen != 1500 {
			t.Fatalf("receive completion %+v: want WITH_INV of %#x, 1500 bytes", wc, key)
		}
		if tap != nil {
			tap.mu.Lock()
			keys, ops := tap.keys, tap.ops
			tap.mu.Unlock()
			if len(keys) == 0 || keys[0] != key || ops[0] != wire.RCSendLastInv {
				t.Fatalf("IETH on the wire: keys %v, opcodes %v", keys, ops)
			}
		}
		// Free again: a second bind works (a type 2 window must be free).
		key2 := nextKey(key)
		post(t, p.qb, SendWR{ID: 5, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: key2,
			Bind: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteRead}})
		wantWC(t, oneWC(t, p.cb), 5, WCBindMW, Success)
		post(t, p.qb, SendWR{ID: 6, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: key2})
		wantWC(t, oneWC(t, p.cb), 6, WCLocalInv, Success)
		if err := mr.Dereg(); err != nil {
			t.Fatalf("Dereg after invalidation: %v", err)
		}
		p.calm()
		post(t, p.qa, SendWR{ID: 7, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: key2})
		wantWC(t, oneWC(t, p.ca), 7, WCRDMARead, RemAccessErr)
	})
}

// TestMWType2OtherQP: a type 2 window's key works only on the QP that
// bound it: a peer connected to another QP of the same PD gets
// REM_ACCESS_ERR.
func TestMWType2OtherQP(t *testing.T) {
	p := newPair(t, pairOpts{})
	mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	mw := allocMW(t, p.pb, MWType2)
	key := nextKey(mw.RKey())
	post(t, p.qb, SendWR{ID: 1, Opcode: WRBindMW, MW: mw, RKey: key, Bind: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteRead}})
	// A second connection whose responder QP is in the same PD.
	qa2, err := p.pa.CreateQP(QPInitAttr{Type: RC, SendCQ: p.ca, RecvCQ: p.ca, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qb2, err := p.pb.CreateQP(QPInitAttr{Type: RC, SendCQ: p.cb, RecvCQ: p.cb, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p.bringUp(qa2, p.db, qb2, 100, 200)
	p.bringUp(qb2, p.da, qa2, 200, 100)
	local := p.reg(p.pa, 64)
	post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, oneWC(t, p.ca), 2, WCRDMARead, Success)
	post(t, qa2, SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, oneWC(t, p.ca), 3, WCRDMARead, RemAccessErr)
}

// TestMWBindErrors: binds the device refuses complete with MW_BIND_ERR and
// move the QP to the error state, flushing what follows (as rxe's
// rxe_do_local_ops).
func TestMWBindErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mrAcc  Access
		typ    MWType
		bind   func(mr *MR) MWBindInfo
		noBind bool // the region lacks MW_BIND
	}{
		{"region without MW_BIND", AccessLocalWrite | AccessRemoteRead, MWType2,
			func(mr *MR) MWBindInfo {
				return MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8, Access: AccessRemoteRead}
			}, true},
		{"writable window, region without LOCAL_WRITE", AccessRemoteRead, MWType2,
			func(mr *MR) MWBindInfo {
				return MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8, Access: AccessRemoteWrite}
			}, false},
		{"range outside the region", AccessLocalWrite | AccessRemoteRead, MWType2,
			func(mr *MR) MWBindInfo {
				return MWBindInfo{MR: mr, Addr: mr.Addr() + 100, Length: 4096, Access: AccessRemoteRead}
			}, false},
		{"type 2 zero length", AccessLocalWrite, MWType2,
			func(mr *MR) MWBindInfo { return MWBindInfo{MR: mr, Addr: mr.Addr()} }, false},
		{"type 1 zero-based by work request", AccessLocalWrite, MWType1,
			func(mr *MR) MWBindInfo {
				return MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8, Access: AccessZeroBased}
			}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forCleanNets(t, func(t *testing.T, p *pair) {
				acc := tc.mrAcc
				if !tc.noBind {
					acc |= AccessMWBind
				}
				mr, err := p.pb.RegMR(make([]byte, 4096), acc)
				if err != nil {
					t.Fatal(err)
				}
				mw := allocMW(t, p.pb, tc.typ)
				k := mw.RKey()
				post(t, p.qb, SendWR{ID: 1, Opcode: WRBindMW, MW: mw, RKey: nextKey(k), Bind: tc.bind(mr)},
					SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, Inline: []byte("x")})
				wcs := waitWC(t, p.cb, 2, waitFor)
				wantWC(t, wcs[0], 1, WCBindMW, MWBindErr)
				wantWC(t, wcs[1], 2, WCSend, WRFlushErr)
				if st := p.qb.State(); st != StateErr {
					t.Fatalf("QP state %v after a failed bind", st)
				}
				if mw.RKey() != k {
					t.Fatalf("a failed bind changed the key: %#x -> %#x", k, mw.RKey())
				}
				if err := mr.Dereg(); err != nil {
					t.Fatalf("Dereg: %v", err)
				}
			})
		})
	}
}

// TestMWInvalidateErrors: invalidations rxe refuses. LOCAL_INV of a type 1
// window or of a region's key completes with LOC_QP_OP_ERR; SEND_WITH_INV of
// a type 1 window's key completes the receive with REM_INV_REQ_ERR and
// fails the receiving QP, while the sender's SEND completes successfully
// (rxe acknowledges the packet, class J).
func TestMWInvalidateErrors(t *testing.T) {
	setup := func(t *testing.T, p *pair) (*pair, *MR, wire.RKey) {
		mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteRead)
		mw := allocMW(t, p.pb, MWType1)
		key, err := p.qb.BindMW(mw, MWBind{ID: 1, Info: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteRead}})
		if err != nil {
			t.Fatal(err)
		}
		return p, mr, key
	}
	t.Run("LOCAL_INV type 1", func(t *testing.T) {
		forCleanNets(t, func(t *testing.T, p *pair) {
			p, _, key := setup(t, p)
			post(t, p.qb, SendWR{ID: 2, Opcode: WRLocalInv, InvRKey: key})
			wantWC(t, oneWC(t, p.cb), 2, WCLocalInv, LocQPOpErr)
		})
	})
	t.Run("LOCAL_INV region", func(t *testing.T) {
		forCleanNets(t, func(t *testing.T, p *pair) {
			p, mr, _ := setup(t, p)
			post(t, p.qb, SendWR{ID: 2, Opcode: WRLocalInv, InvRKey: mr.RKey()})
			wantWC(t, oneWC(t, p.cb), 2, WCLocalInv, LocQPOpErr)
		})
	})
	t.Run("SEND_WITH_INV type 1", func(t *testing.T) {
		forCleanNets(t, func(t *testing.T, p *pair) {
			p, _, key := setup(t, p)
			recv := p.reg(p.pb, 64)
			if err := p.qb.PostRecv([]RecvWR{{ID: 3, SGL: []SGE{recv.SGE(0, 64)}}, {ID: 4, SGL: []SGE{recv.SGE(0, 64)}}}); err != nil {
				t.Fatal(err)
			}
			post(t, p.qa, SendWR{ID: 5, Opcode: WRSendWithInv, Flags: SendSignaled, Inline: []byte("inv"), InvRKey: key})
			wantWC(t, oneWC(t, p.ca), 5, WCSend, Success)
			wcs := waitWC(t, p.cb, 2, waitFor)
			wantWC(t, wcs[0], 3, WCRecv, RemInvReqErr)
			if wcs[0].Flags&WCWithInv != 0 {
				t.Fatal("failed receive flagged WITH_INV")
			}
			wantWC(t, wcs[1], 4, WCRecv, WRFlushErr)
			if st := p.qb.State(); st != StateErr {
				t.Fatalf("receiver in %v", st)
			}
		})
	})
}

// TestMWAPIErrors: misuse of the window API returns errors wrapping the
// sentinels, as libibverbs returns EINVAL or EPERM.
func TestMWAPIErrors(t *testing.T) {
	p := newPair(t, pairOpts{})
	if _, err := p.pb.AllocMW(3); !errors.Is(err, ErrInvalid) {
		t.Errorf("AllocMW(3): %v", err)
	}
	mr := regBind(t, p.pb, 64, AccessLocalWrite)
	mw1, mw2 := allocMW(t, p.pb, MWType1), allocMW(t, p.pb, MWType2)
	otherPD, _ := p.db.AllocPD()
	mrOther := regBind(t, otherPD, 64, AccessLocalWrite)
	for _, tc := range []struct {
		name string
		mw   *MW
		info MWBindInfo
	}{
		{"type 2 window", mw2, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8}},
		{"range without region", mw1, MWBindInfo{Length: 8}},
		{"zero-based", mw1, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8, Access: AccessZeroBased}},
		{"region of another PD", mw1, MWBindInfo{MR: mrOther, Addr: mrOther.Addr(), Length: 8}},
	} {
		if _, err := p.qb.BindMW(tc.mw, MWBind{Info: tc.info}); !errors.Is(err, ErrInvalid) {
			t.Errorf("BindMW %s: %v", tc.name, err)
		}
	}
	var werr *WRError
	if err := p.qb.PostSend([]SendWR{{Opcode: WRBindMW}}); !errors.As(err, &werr) || !errors.Is(err, ErrInvalid) {
		t.Errorf("BIND_MW without a window: %v", err)
	}
	ud := &pair{t: t, da: p.da, db: p.db}
	ud.connect(pairOpts{typ: UD})
	ah, err := ud.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0], PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []WROpcode{WRSendWithInv, WRLocalInv, WRBindMW} {
		if err := ud.qa.PostSend([]SendWR{{Opcode: op, AH: ah, MW: mw2}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v on UD: %v", op, err)
		}
	}
	if err := mw1.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mw1.Dealloc(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Dealloc: %v", err)
	}
	// A bound window may be deallocated (as rxe); its region is then free.
	key := nextKey(mw2.RKey())
	post(t, p.qb, SendWR{ID: 9, Opcode: WRBindMW, Flags: SendSignaled, MW: mw2, RKey: key, Bind: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteRead}})
	wantWC(t, oneWC(t, p.cb), 9, WCBindMW, Success)
	if err := mr.Dereg(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dereg while bound: %v", err)
	}
	if err := mw2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatalf("Dereg after the window's Dealloc: %v", err)
	}
	if err := p.pb.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Fatalf("PD Dealloc with objects: %v", err) // the QP and other regions
	}
	a := p.db.QueryDevice()
	if a.MaxMW != 524287 || a.DeviceCapFlags != DeviceMemWindow|DeviceMemMgtExtensions|DeviceMemWindowType2B {
		t.Errorf("device attributes: max_mw %d, cap flags %#x", a.MaxMW, a.DeviceCapFlags)
	}
	if WCBindMW.String() != "BIND_MW" || WRSendWithInv.String() != "SEND_WITH_INV" {
		t.Errorf("names %v %v", WCBindMW, WRSendWithInv)
	}
}

// TestMRReReg: ibv_rereg_mr as rxe supports it. Dropping remote read makes
// the peer's READ fail with REM_ACCESS_ERR; adding it back (same keys)
// lets it read again; moving the region to another PD makes the key fail
// on the old PD's QP; translation is not supported; bound windows refuse.
func TestMRReReg(t *testing.T) {
	forMWNets(t, func(t *testing.T, p *pair) {
		mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteRead)
		lk, rk := mr.LKey(), mr.RKey()
		local := p.reg(p.pa, 64)
		read := func(id uint64) {
			post(t, p.qa, SendWR{ID: id, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: rk})
		}
		read(1)
		wantWC(t, oneWC(t, p.ca), 1, WCRDMARead, Success)
		if err := mr.ReReg(ReRegAccess, nil, AccessLocalWrite|AccessMWBind); err != nil {
			t.Fatal(err)
		}
		if mr.RKey() != 0 || mr.LKey() != lk {
			t.Fatalf("keys after dropping remote access: %#x %#x", mr.LKey(), mr.RKey())
		}
		if err := mr.ReReg(ReRegAccess, nil, AccessLocalWrite|AccessRemoteRead|AccessMWBind); err != nil {
			t.Fatal(err)
		}
		if mr.RKey() != rk {
			t.Fatalf("R_Key %#x after restoring remote read, want %#x", mr.RKey(), rk)
		}
		read(2)
		wantWC(t, oneWC(t, p.ca), 2, WCRDMARead, Success)
		if err := mr.ReReg(ReRegTranslation, nil, 0); !errors.Is(err, ErrNotSupported) {
			t.Fatalf("translation: %v", err)
		}
		if err := mr.ReReg(ReRegAccess, nil, AccessRemoteWrite); !errors.Is(err, ErrInvalid) {
			t.Fatalf("remote write without local write: %v", err)
		}
		mw := allocMW(t, p.pb, MWType1)
		if _, err := p.qb.BindMW(mw, MWBind{ID: 3, Flags: SendSignaled, Info: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8, Access: AccessRemoteRead}}); err != nil {
			t.Fatal(err)
		}
		wantWC(t, oneWC(t, p.cb), 3, WCBindMW, Success)
		if err := mr.ReReg(ReRegAccess, nil, AccessLocalWrite); !errors.Is(err, ErrBusy) {
			t.Fatalf("with a window bound: %v", err)
		}
		if err := mw.Dealloc(); err != nil {
			t.Fatal(err)
		}
		other, err := p.db.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		if err := mr.ReReg(ReRegPD, other, 0); err != nil {
			t.Fatal(err)
		}
		if mr.PD() != other {
			t.Fatal("PD not changed")
		}
		p.calm()
		read(4)
		wantWC(t, oneWC(t, p.ca), 4, WCRDMARead, RemAccessErr)
		if err := mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		if err := other.Dealloc(); err != nil {
			t.Fatalf("the other PD after Dereg: %v", err)
		}
	})
}

// TestMWType2QPDestroy: destroying the QP a type 2 window was bound
// through frees the window, and its region can be deregistered.
func TestMWType2QPDestroy(t *testing.T) {
	p := newPair(t, pairOpts{})
	mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteRead)
	mw := allocMW(t, p.pb, MWType2)
	post(t, p.qb, SendWR{ID: 1, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: nextKey(mw.RKey()), Bind: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteRead}})
	wantWC(t, oneWC(t, p.cb), 1, WCBindMW, Success)
	if err := mr.Dereg(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dereg while bound: %v", err)
	}
	if err := p.qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatalf("Dereg after the QP's destruction: %v", err)
	}
}
