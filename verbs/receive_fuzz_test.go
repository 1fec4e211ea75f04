package verbs

import (
	"encoding/binary"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// FuzzReceive drives the device's receive path with crafted packet
// sequences: any opcode (requests, responses, acknowledgements, unknown
// bytes) to an RC QP with work outstanding both ways, a UC QP, a UD QP or no
// QP, with PSNs near the ones expected, any lengths, keys (a region's, a
// bound type 1 or type 2 memory window's, any other) and addresses.
// The engine must not panic, fault or hang, leave its QPs in a state the
// verbs allow (RTS, or ERR after an error the packets caused) and, once the
// QPs are destroyed, keep no goroutine (TestMain checks). Each 16 input bytes
// make one packet.
func FuzzReceive(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte{byte(wire.RCSendOnly), 0, 0, 1, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{byte(wire.RCWriteFirst), 0, 0, 1, 4, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0,
		byte(wire.RCWriteLast), 0, 1, 1, 0, 16, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{byte(wire.RCAcknowledge), 0, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0, 0,
		byte(wire.RCReadResponseFirst), 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{byte(wire.RCAtomicWrite), 0, 0, 1, 0, 8, 0, 0, 8, 0, 8, 0, 0, 0, 0, 0,
		byte(wire.RCFlush), 0, 1, 1, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{byte(wire.UCSendOnly), 1, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		byte(wire.UDSendOnly), 2, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0x11, 0x11, 0x11, 0x11})
	// SEND_WITH_INV of the type 2 window's key, then of the type 1's; a
	// WRITE through the type 1 window.
	f.Add([]byte{byte(wire.RCSendOnlyInv), 0, 0, 1, 0, 8, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		byte(wire.RCSendOnlyInv), 0, 1, 1, 0, 8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		byte(wire.RCWriteOnly), 0, 2, 1, 0, 8, 2, 0, 0, 0, 8, 0, 0, 0, 0, 0})
	_, da, db := newDevicesLoop(f, &pairOpts{})
	f.Fuzz(func(t *testing.T, data []byte) { receivePackets(t, da, db, data) })
}

// receivePackets is FuzzReceive's body: fresh QPs on da and db, work
// outstanding, then the packets data describes handed to db's receive path.
func receivePackets(t *testing.T, da, db *Device, data []byte) {
	rc := &pair{t: t, da: da, db: db}
	rc.connect(pairOpts{mtu: MTU1024, wr: 16, cqe: 256})
	uc := &pair{t: t, da: da, db: db}
	uc.connect(pairOpts{typ: UC, mtu: MTU1024, wr: 16, cqe: 256})
	ud := &pair{t: t, da: da, db: db}
	ud.connect(pairOpts{typ: UD, wr: 16, cqe: 256})
	ma, mb := rc.reg(rc.pa, 64*1024), rc.reg(rc.pb, 64*1024)
	mu, mud := uc.reg(uc.pb, 8192), ud.reg(ud.pb, 8192)
	t.Cleanup(func() {
		for _, p := range []*pair{rc, uc, ud} {
			p.qa.Destroy()
			p.qb.Destroy()
		}
		for _, mr := range []*MR{ma, mb, mu, mud} {
			mr.Dereg()
		}
		for _, p := range []*pair{rc, uc, ud} {
			p.ca.Destroy()
			p.cb.Destroy()
			p.pa.Dealloc()
			p.pb.Dealloc()
		}
	})
	// Windows on a region of the RC responder: type 1 bound by the call,
	// type 2 by a work request on the RC QP.
	mw, err := rc.pb.RegMR(make([]byte, 8192), AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	w1, err1 := rc.pb.AllocMW(MWType1)
	w2, err2 := rc.pb.AllocMW(MWType2)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	wAccess := AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	k1, err := rc.qb.BindMW(w1, MWBind{Info: MWBindInfo{MR: mw, Addr: mw.Addr(), Length: 4096, Access: wAccess}})
	if err != nil {
		t.Fatal(err)
	}
	k2 := nextKey(w2.RKey())
	post(t, rc.qb, SendWR{Opcode: WRBindMW, MW: w2, RKey: k2, Bind: MWBindInfo{MR: mw, Addr: mw.Addr() + 4096, Length: 4096, Access: wAccess | AccessZeroBased}})
	// Cleanups run last first: these before the PDs' deallocation.
	t.Cleanup(func() {
		w1.Dealloc()
		w2.Dealloc()
		mw.Dereg()
	})
	// Work both ways on the RC pair, real traffic beside the crafted.
	for i := range 4 {
		postRecv(t, rc.qb, RecvWR{ID: uint64(i), SGL: []SGE{mb.SGE(i*1024, 1024)}})
		postRecv(t, uc.qb, RecvWR{ID: uint64(i), SGL: []SGE{mu.SGE(i*1024, 1024)}})
		postRecv(t, ud.qb, RecvWR{ID: uint64(i), SGL: []SGE{mud.SGE(i*2048, 2048)}})
	}
	post(t, rc.qb,
		SendWR{ID: 1, Opcode: WRRDMAWrite, SGL: []SGE{mb.SGE(8192, 3000)}, RemoteAddr: ma.Addr(), RKey: ma.RKey()},
		SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{mb.SGE(16384, 5000)}, RemoteAddr: ma.Addr() + 8192, RKey: ma.RKey()},
		SendWR{ID: 3, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{mb.SGE(32768, 8)}, RemoteAddr: ma.Addr() + 40960, RKey: ma.RKey(), CompareAdd: 1})
	post(t, rc.qa, SendWR{ID: 4, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 700)}})
	targets := []*QP{rc.qb, uc.qb, ud.qb}
	for len(data) >= 16 {
		c := data[:16]
		data = data[16:]
		var h wire.Headers
		h.BTH.Opcode = wire.Opcode(c[0])
		h.BTH.PKey = wire.DefaultPKey
		var base wire.PSN
		if int(c[1]&3) < len(targets) {
			qp := targets[c[1]&3]
			h.BTH.DestQP = qp.qpn
			qp.mu.Lock()
			base = qp.resp.psn
			if info := h.BTH.Opcode.Info(); info != nil && info.Is(wire.FlagResponse) {
				base = qp.req.AckedPSN()
			}
			qp.mu.Unlock()
		} else {
			h.BTH.DestQP = wire.QPN(binary.BigEndian.Uint32(c[12:]) & wire.Mask24)
		}
		h.BTH.PSN = base.Add(int(int8(c[2])))
		h.BTH.AckReq, h.BTH.Solicited = c[3]&1 != 0, c[3]&2 != 0
		if c[3]&4 != 0 {
			h.BTH.PKey = 0x1234
		}
		n := int(binary.BigEndian.Uint16(c[4:])) % 1100
		rkey := wire.RKey(mb.RKey())
		va := mb.Addr() + uint64(binary.BigEndian.Uint16(c[7:]))
		switch {
		case c[6]&1 != 0:
			rkey = wire.RKey(binary.BigEndian.Uint32(c[12:]))
		case c[6]&2 != 0:
			rkey, va = k1, mw.Addr()+uint64(binary.BigEndian.Uint16(c[7:]))
		case c[6]&4 != 0:
			rkey, va = k2, uint64(binary.BigEndian.Uint16(c[7:]))
		}
		h.RETH = wire.RETHFields{VA: va, RKey: rkey, DMALen: uint32(binary.BigEndian.Uint16(c[9:]))}
		h.Atomic = wire.AtomicETHFields{VA: va, RKey: rkey, SwapAdd: uint64(c[13]), Compare: uint64(c[14])}
		h.AETH = wire.AETHFields{Syndrome: wire.Syndrome(c[11]), MSN: wire.MSN(c[15])}
		h.DETH = wire.DETHFields{QKey: wire.QKey(binary.BigEndian.Uint32(c[12:])), SrcQP: ud.qa.qpn}
		h.Imm, h.AtomicAck, h.InvRKey = binary.BigEndian.Uint32(c[12:]), uint64(c[13]), rkey
		h.FETH = wire.FETHFields{Selectivity: c[13] & 3, PlacementType: c[14] & 0xF}
		pk := link.Get()
		hl, err := wire.WriteHeaders(pk.Buf, &h, n)
		if err != nil {
			// Not a packet this opcode can have: send the bytes as
			// they are, for the parser to refuse.
			hl, n = copy(pk.Buf, c), 0
		}
		end := hl + n + wire.PadFor(n)
		clear(pk.Buf[hl:end])
		pk.N = end + wire.ICRCLen
		pk.Src = netipAddrPort(rc.qa.src)
		pk.Dst = rc.qa.dst
		db.receive([]*link.Packet{pk})
		link.Put(pk)
	}
	for _, qp := range targets {
		switch s := qp.State(); s {
		case StateRTS, StateErr:
		default:
			t.Fatalf("QP %d (%v) in state %v", qp.qpn, qp.typ, s)
		}
	}
	// Completions and events the packets caused are legitimate: drain
	// them so they do not spill into the next input.
	drain := make([]WC, 64)
	for _, cq := range []*CQ{rc.cb, uc.cb, ud.cb, rc.ca} {
		for cq.Poll(drain) > 0 {
		}
	}
	for len(db.Events()) > 0 {
		<-db.Events()
	}
	for len(da.Events()) > 0 {
		<-da.Events()
	}
}
