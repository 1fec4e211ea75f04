package verbs

import (
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// TestWRTable pins the WR-opcode table to the facts it encodes: the QP
// types that may post each opcode (IBTA 9.4 / rxe's opcode table),
// libibverbs' completion opcodes, and the BTH opcodes of each packet of a
// message (IBTA table 38). The other tests take legality and completion
// opcodes from the table, so this is where they are checked.
func TestWRTable(t *testing.T) {
	type want struct {
		rc, uc, ud bool
		wc         WCOpcode
		rdAtomic   bool
		// only, first, middle, last on RC
		only, first, middle, last wire.Opcode
	}
	cases := map[WROpcode]want{
		WRRDMAWrite:         {true, true, false, WCRDMAWrite, false, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast},
		WRRDMAWriteWithImm:  {true, true, false, WCRDMAWrite, false, wire.RCWriteOnlyImm, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLastImm},
		WRSend:              {true, true, true, WCSend, false, wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast},
		WRSendWithImm:       {true, true, true, WCSend, false, wire.RCSendOnlyImm, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastImm},
		WRRDMARead:          {true, false, false, WCRDMARead, true, wire.RCReadRequest, wire.RCReadRequest, wire.RCReadRequest, wire.RCReadRequest},
		WRAtomicCmpAndSwp:   {true, false, false, WCCompSwap, true, wire.RCCompareSwap, wire.RCCompareSwap, wire.RCCompareSwap, wire.RCCompareSwap},
		WRAtomicFetchAndAdd: {true, false, false, WCFetchAdd, true, wire.RCFetchAdd, wire.RCFetchAdd, wire.RCFetchAdd, wire.RCFetchAdd},
		// Memory windows (mw.go): the IETH opcodes are RC's alone; local
		// work requests send nothing (rxe allows them on RC and UC).
		WRSendWithInv: {true, false, false, WCSend, false, wire.RCSendOnlyInv, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastInv},
		WRLocalInv:    {true, true, false, WCLocalInv, false, 0, 0, 0, 0},
		WRBindMW:      {true, true, false, WCBindMW, false, 0, 0, 0, 0},
		WRFlush:       {true, false, false, WCFlush, true, wire.RCFlush, wire.RCFlush, wire.RCFlush, wire.RCFlush},
		WRAtomicWrite: {true, false, false, WCAtomicWrite, true, wire.RCAtomicWrite, wire.RCAtomicWrite, wire.RCAtomicWrite, wire.RCAtomicWrite},
	}
	defined := 0
	for op := range WROpcode(len(wrTable)) {
		if wrInfoOf(op) != nil {
			defined++
		}
	}
	if len(cases) != defined {
		t.Fatalf("table has %d opcodes, test %d", defined, len(cases))
	}
	for op, w := range cases {
		i := wrInfoOf(op)
		if i == nil {
			t.Fatalf("%d: no entry", op)
		}
		if i.types.has(RC) != w.rc || i.types.has(UC) != w.uc || i.types.has(UD) != w.ud {
			t.Errorf("%v: QP types RC %v UC %v UD %v, want %v %v %v", op, i.types.has(RC), i.types.has(UC), i.types.has(UD), w.rc, w.uc, w.ud)
		}
		if i.wc != w.wc || i.rdAtomic() != w.rdAtomic {
			t.Errorf("%v: wc %v rdAtomic %v, want %v %v", op, i.wc, i.rdAtomic(), w.wc, w.rdAtomic)
		}
		if i.class == classLocal {
			continue // no packet
		}
		for _, c := range []struct {
			first, last bool
			want        wire.Opcode
		}{{true, true, w.only}, {true, false, w.first}, {false, false, w.middle}, {false, true, w.last}} {
			if got := i.requestOpcode(RC, c.first, c.last); got != c.want {
				t.Errorf("%v first=%v last=%v: %v, want %v", op, c.first, c.last, got, c.want)
			}
			// The same operation on UC and UD differs only in its transport.
			for _, typ := range []QPType{UC, UD} {
				if op == WRSendWithInv {
					break
				}
				if got := i.requestOpcode(typ, c.first, c.last); got != transportOf(typ)|(c.want&^wire.TransportRC) {
					t.Errorf("%v on %v: %v", op, typ, got)
				}
			}
		}
	}
	for _, op := range []WROpcode{-1, 10, 99} { // 10: IBV_WR_TSO
		if wrInfoOf(op) != nil {
			t.Errorf("%d has an entry", op)
		}
	}
	if WRRDMARead.String() != "RDMA_READ" || WROpcode(99).String() != "WROpcode(99)" {
		t.Errorf("String: %q %q", WRRDMARead.String(), WROpcode(99).String())
	}
}
