// FLUSH and ATOMIC_WRITE end to end: results, the responses on the wire,
// file-backed persistence, the error rules and duplicates, over link/loop
// and kernel UDP.

package verbs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// a19Access lets a QP take FLUSHes of both placement types.
const a19Access = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic |
	AccessFlushGlobal | AccessFlushPersistent

func setQPAccess(t testing.TB, qp *QP, a Access) {
	t.Helper()
	if err := qp.Modify(&QPAttr{AccessFlags: a}, AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
}

func atomicWR(id uint64, mr *MR, off int, v uint64) SendWR {
	return SendWR{ID: id, Opcode: WRAtomicWrite, Flags: SendSignaled, Inline: AtomicWriteValue(v),
		RemoteAddr: mr.Addr() + uint64(off), RKey: mr.RKey()}
}

func flushWR(id uint64, mr *MR, off int, n uint32, typ FlushType, level FlushLevel) SendWR {
	return SendWR{ID: id, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: mr.Addr() + uint64(off), RKey: mr.RKey(),
		Flush: FlushSpec{Len: n, Type: typ, Level: level}}
}

// word reads the 8 bytes at off of b atomically, in host order.
func word(b []byte, off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

// runA19 exercises both verbs on a connected RC pair: ATOMIC_WRITE from
// Inline data and from an SGE, a WRITE followed by FLUSHes of a range and
// of the whole region, with unsignaled requests in between, and checks the
// memory and completions.
func runA19(t *testing.T, p *pair) {
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 8192)
	setQPAccess(t, p.qb, a19Access)
	binary.NativeEndian.PutUint64(ma.Buf()[64:], 0xA5A5_0000_1234_5678)
	for i := range 256 {
		ma.Buf()[1024+i] = byte(i)
	}
	post(t, p.qa,
		atomicWR(1, mb, 8, 0x1122_3344_5566_7788),
		SendWR{ID: 2, Opcode: WRAtomicWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(64, 8)}, RemoteAddr: mb.Addr() + 16, RKey: mb.RKey()},
		SendWR{ID: 3, Opcode: WRRDMAWrite, SGL: []SGE{ma.SGE(1024, 256)}, RemoteAddr: mb.Addr() + 4096, RKey: mb.RKey()},
		flushWR(4, mb, 4096, 256, FlushGlobal, FlushRange),
		flushWR(5, mb, 0, 0, FlushGlobal, FlushMR),
		SendWR{ID: 6, Opcode: WRAtomicWrite, Inline: AtomicWriteValue(7), RemoteAddr: mb.Addr() + 24, RKey: mb.RKey()},
		flushWR(7, mb, 24, 8, FlushGlobal, FlushRange))
	wcs := waitWC(t, p.ca, 5, waitFor)
	// byte_len as rxe reports it: 8 for ATOMIC_WRITE, the range's length
	// for FLUSH (the provider's WQE DMA length).
	want := []struct {
		id      uint64
		op      WCOpcode
		byteLen uint32
	}{{1, WCAtomicWrite, 8}, {2, WCAtomicWrite, 8}, {4, WCFlush, 256}, {5, WCFlush, 0}, {7, WCFlush, 8}}
	for i, w := range want {
		checkWC(t, wcs[i], w.id, Success, w.op)
		if wcs[i].ByteLen != w.byteLen {
			t.Errorf("WR %d (%v): byte_len %d, want %d", w.id, w.op, wcs[i].ByteLen, w.byteLen)
		}
	}
	b := mb.Buf()
	if got := word(b, 8); got != 0x1122_3344_5566_7788 {
		t.Errorf("word at 8 = %#x after ATOMIC_WRITE", got)
	}
	if got := word(b, 16); got != 0xA5A5_0000_1234_5678 {
		t.Errorf("word at 16 = %#x after ATOMIC_WRITE from an SGE", got)
	}
	if got := word(b, 24); got != 7 {
		t.Errorf("word at 24 = %d", got)
	}
	if word(b, 0) != 0 || word(b, 32) != 0 {
		t.Error("ATOMIC_WRITE touched a neighbouring word")
	}
	for i := range 256 {
		if b[4096+i] != byte(i) {
			t.Fatalf("WRITE data at %d = %d before the FLUSH's completion", i, b[4096+i])
		}
	}
	expectState(t, p.qa, StateRTS)
	expectState(t, p.qb, StateRTS)
}

func TestA19Loop(t *testing.T) {
	p := newPair(t, pairOpts{})
	w := p.tap()
	runA19(t, p)
	// Each request is answered by a READ response ONLY without payload, at
	// its own PSN, as rxe answers; nothing else comes back but ACKs.
	reqs := w.all(both(from(p.da), func(tp *tapped) bool {
		return tp.op == wire.RCAtomicWrite || tp.op == wire.RCFlush
	}))
	resps := w.all(both(from(p.db), func(tp *tapped) bool { return tp.op == wire.RCReadResponseOnly }))
	if len(reqs) != 6 || len(resps) != 6 {
		t.Fatalf("%d FLUSH/ATOMIC_WRITE requests and %d READ responses, want 6 and 6", len(reqs), len(resps))
	}
	for i := range reqs {
		r := resps[i]
		if r.psn != reqs[i].psn || r.payload != 0 || !r.aeth || r.syn != wire.SyndromeACKUnlimited {
			t.Errorf("response %d: %+v for request at PSN %v", i, r, reqs[i].psn)
		}
		if reqs[i].op == wire.RCAtomicWrite && reqs[i].payload != 8 {
			t.Errorf("ATOMIC_WRITE with %d payload bytes", reqs[i].payload)
		}
	}
	if n := len(w.all(both(from(p.db), isNAK))); n != 0 {
		t.Errorf("%d NAKs", n)
	}
}

func TestA19UDP(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		t.Run(fam, func(t *testing.T) {
			da, db := newDevicesUDP(t, fam == "IPv6")
			p := &pair{t: t, da: da, db: db}
			p.connect(pairOpts{timeout: 14})
			runA19(t, p)
			t.Run("file", func(t *testing.T) { runFlushFile(t, p) })
			// Last, as it breaks the connection: a rule over UDP.
			t.Run("misaligned", func(t *testing.T) {
				mb := p.reg(p.pb, 64)
				post(t, p.qa, atomicWR(9, mb, 4, 1))
				checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 9, RemInvReqErr, WCAtomicWrite)
				expectState(t, p.qa, StateErr)
				expectState(t, p.qb, StateErr)
				if word(mb.Buf(), 0) != 0 || word(mb.Buf(), 8) != 0 {
					t.Error("a misaligned ATOMIC_WRITE changed memory")
				}
			})
		})
	}
}

func TestFlushFileLoop(t *testing.T) {
	runFlushFile(t, newPair(t, pairOpts{}))
}

// dirtyKB returns the dirty kilobytes of the mapping at b from
// /proc/self/smaps: pages stored to and not yet written back.
func dirtyKB(t *testing.T, b []byte) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	prefix := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&b[0])))
	sc := bufio.NewScanner(f)
	in, found, kb := false, false, 0
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, ' '); i > 0 && strings.Contains(line[:i], "-") && !strings.HasSuffix(line[:i], ":") {
			in = strings.HasPrefix(line, prefix)
			found = found || in
			continue
		}
		if in && (strings.HasPrefix(line, "Shared_Dirty:") || strings.HasPrefix(line, "Private_Dirty:")) {
			n, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatal(err)
			}
			kb += n
		}
	}
	if !found {
		t.Fatalf("no mapping at %s in smaps", prefix)
	}
	return kb
}

// runFlushFile writes into a file-backed region with RDMA WRITE and
// ATOMIC_WRITE and makes it persistent with FLUSH: before the FLUSH the
// mapping has dirty pages; after its completion it has none (msync wrote
// them back), and the file, read through another descriptor, holds the
// data.
func runFlushFile(t *testing.T, p *pair) {
	pg := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "region")
	if err := os.WriteFile(path, make([]byte, 4*pg), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := p.pb.RegFile(f, int64(pg), 2*pg, AccessLocalWrite|AccessRemoteWrite|AccessFlushGlobal|AccessFlushPersistent)
	f.Close() // the mapping outlives the descriptor
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Dereg()
	setQPAccess(t, p.qb, a19Access)
	ma := p.reg(p.pa, 4096)
	copy(ma.Buf(), "persisted over RDMA")
	post(t, p.qa,
		SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 19)}, RemoteAddr: mf.Addr() + uint64(pg) + 100, RKey: mf.RKey()},
		atomicWR(2, mf, 8, 0x0102_0304_0506_0708))
	waitWC(t, p.ca, 2, waitFor)
	if d := dirtyKB(t, mf.Buf()); d == 0 {
		t.Fatal("the WRITE left the mapping clean: the test cannot tell whether FLUSH writes back")
	}
	post(t, p.qa, flushWR(3, mf, pg+100, 19, FlushPersistent, FlushRange))
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 3, Success, WCFlush)
	// The range's page is clean. The other (the ATOMIC_WRITE's) may be
	// too: ext4 in ordered mode writes back all the file's data with a
	// journal commit.
	if d := dirtyKB(t, mf.Buf()); d > pg/1024 {
		t.Errorf("%d kB dirty after flushing the page written", d)
	}
	post(t, p.qa, flushWR(4, mf, 0, 0, FlushPersistent|FlushGlobal, FlushMR))
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 4, Success, WCFlush)
	if d := dirtyKB(t, mf.Buf()); d != 0 {
		t.Errorf("%d kB dirty after flushing the whole region", d)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(got[2*pg+100 : 2*pg+119]); s != "persisted over RDMA" {
		t.Errorf("file holds %q", s)
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], 0x0102_0304_0506_0708)
	if string(got[pg+8:pg+16]) != string(v[:]) {
		t.Errorf("file holds %x at the ATOMIC_WRITE's word", got[pg+8:pg+16])
	}
}

func TestA19Registration(t *testing.T) {
	_, da, _ := newDevicesLoop(t, &pairOpts{})
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	// Persistence needs a file: anonymous memory is refused it, as rxe
	// refuses IBV_ACCESS_FLUSH_PERSISTENT on memory that is not pmem.
	if _, err := pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessFlushPersistent); !errors.Is(err, ErrInvalid) {
		t.Errorf("RegMR with FlushPersistent: %v, want ErrInvalid", err)
	}
	if _, err := pd.AllocMR(4096, AccessLocalWrite|AccessFlushPersistent); !errors.Is(err, ErrInvalid) {
		t.Errorf("AllocMR with FlushPersistent: %v, want ErrInvalid", err)
	}
	mr, err := pd.RegMR(make([]byte, 64), AccessFlushGlobal)
	if err != nil {
		t.Fatal(err)
	}
	if mr.RKey() == 0 || mr.Access() != AccessFlushGlobal {
		t.Errorf("FlushGlobal region: rkey %#x access %v", mr.RKey(), mr.Access())
	}
	mr.Dereg()
	f, err := os.CreateTemp(t.TempDir(), "short")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := pd.RegFile(f, 0, 4096, AccessLocalWrite); !errors.Is(err, ErrInvalid) {
		t.Errorf("RegFile past the end of the file: %v, want ErrInvalid", err)
	}
	if _, err := pd.RegFile(f, 0, 0, AccessLocalWrite); !errors.Is(err, ErrInvalid) {
		t.Errorf("RegFile of 0 bytes: %v, want ErrInvalid", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("PD still referenced after failed registrations: %v", err)
	}
	attr := da.QueryDevice()
	if got := attr.DeviceCapFlagsEx; got != attr.DeviceCapFlags|DeviceFlushGlobal|DeviceFlushPersistent|DeviceAtomicWrite ||
		DeviceFlushGlobal != 1<<38 || DeviceFlushPersistent != 1<<39 || DeviceAtomicWrite != 1<<40 {
		t.Errorf("DeviceCapFlagsEx = %#x", uint64(got))
	}
	if WRFlush != 14 || WRAtomicWrite != 15 || WCFlush != 8 || WCAtomicWrite != 9 ||
		AccessFlushGlobal != 256 || AccessFlushPersistent != 512 || FlushGlobal != 1 || FlushPersistent != 2 || FlushMR != 1 {
		t.Error("values differ from libibverbs'")
	}
}

// TestA19PostChecks: work requests refused at post time, and the wrong
// transports.
func TestA19PostChecks(t *testing.T) {
	p := newPair(t, pairOpts{})
	ma := p.reg(p.pa, 4096)
	for _, c := range []struct {
		name string
		wr   SendWR
	}{
		{"atomic-write/4-byte-inline", SendWR{Opcode: WRAtomicWrite, Inline: []byte{1, 2, 3, 4}}},
		{"atomic-write/no-data", SendWR{Opcode: WRAtomicWrite}},
		{"atomic-write/16-byte-sge", SendWR{Opcode: WRAtomicWrite, SGL: []SGE{ma.SGE(0, 16)}}},
		{"atomic-write/inline-and-sge", SendWR{Opcode: WRAtomicWrite, Inline: make([]byte, 8), SGL: []SGE{ma.SGE(0, 8)}}},
		{"atomic-write/bad-lkey", SendWR{Opcode: WRAtomicWrite, SGL: []SGE{{Addr: ma.Addr(), Length: 8, LKey: ^ma.LKey()}}}},
		{"flush/type-0", SendWR{Opcode: WRFlush}},
		{"flush/type-4", SendWR{Opcode: WRFlush, Flush: FlushSpec{Type: 4}}},
		{"flush/level-2", SendWR{Opcode: WRFlush, Flush: FlushSpec{Type: FlushGlobal, Level: 2}}},
		{"flush/with-data", SendWR{Opcode: WRFlush, Flush: FlushSpec{Type: FlushGlobal}, SGL: []SGE{ma.SGE(0, 8)}}},
	} {
		if err := p.qa.PostSend([]SendWR{c.wr}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	for _, typ := range []QPType{UC, UD} {
		q := newPair(t, pairOpts{typ: typ})
		for _, wr := range []SendWR{atomicWR(1, ma, 0, 1), flushWR(2, ma, 0, 8, FlushGlobal, FlushRange)} {
			if err := q.qa.PostSend([]SendWR{wr}); !errors.Is(err, ErrInvalid) {
				t.Errorf("%v on %v: %v, want ErrInvalid", wr.Opcode, typ, err)
			}
		}
	}
	expectNoWC(t, p.ca)
	expectState(t, p.qa, StateRTS)
}

// TestA19Errors: each rule the responder enforces, its NAK, the status at
// the requester, both QPs' states and the responder's event.
func TestA19Errors(t *testing.T) {
	type env struct {
		p  *pair
		mb *MR
	}
	otherMR := func(e env, a Access) *MR {
		mr, err := e.p.pb.RegMR(make([]byte, 4096), a)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	cases := []struct {
		name   string
		qpAcc  Access // the responder QP's access flags; 0 means a19Access
		wr     func(e env) SendWR
		status Status
		nak    wire.NAKCode
		event  EventType
		op     WCOpcode
	}{
		{"atomic-write/misaligned", 0, func(e env) SendWR { return atomicWR(1, e.mb, 4, 1) },
			RemInvReqErr, wire.NAKInvalidReq, EventQPReqErr, WCAtomicWrite},
		{"atomic-write/bad-rkey", 0, func(e env) SendWR {
			w := atomicWR(1, e.mb, 0, 1)
			w.RKey = ^w.RKey
			return w
		}, RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCAtomicWrite},
		{"atomic-write/out-of-bounds", 0, func(e env) SendWR { return atomicWR(1, e.mb, e.mb.Len(), 1) },
			RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCAtomicWrite},
		{"atomic-write/mr-without-remote-write", 0, func(e env) SendWR {
			return atomicWR(1, otherMR(e, AccessLocalWrite|AccessRemoteRead|AccessRemoteAtomic), 0, 1)
		}, RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCAtomicWrite},
		{"atomic-write/qp-without-remote-write", AccessRemoteRead | AccessRemoteAtomic, func(e env) SendWR { return atomicWR(1, e.mb, 0, 1) },
			RemInvReqErr, wire.NAKInvalidReq, EventQPReqErr, WCAtomicWrite},
		{"flush/out-of-range", 0, func(e env) SendWR { return flushWR(1, e.mb, e.mb.Len()-8, 16, FlushGlobal, FlushRange) },
			RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCFlush},
		{"flush/bad-rkey", 0, func(e env) SendWR {
			w := flushWR(1, e.mb, 0, 0, FlushGlobal, FlushMR)
			w.RKey = ^w.RKey
			return w
		}, RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCFlush},
		{"flush/mr-without-flush-access", 0, func(e env) SendWR {
			return flushWR(1, otherMR(e, AccessLocalWrite|AccessRemoteWrite), 0, 8, FlushGlobal, FlushRange)
		}, RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCFlush},
		{"flush/persistent-on-a-global-only-mr", 0, func(e env) SendWR { return flushWR(1, e.mb, 0, 8, FlushPersistent, FlushRange) },
			RemAccessErr, wire.NAKRemoteAccess, EventQPAccessErr, WCFlush},
		{"flush/qp-without-flush-global", AccessRemoteWrite, func(e env) SendWR { return flushWR(1, e.mb, 0, 8, FlushGlobal, FlushRange) },
			RemInvReqErr, wire.NAKInvalidReq, EventQPReqErr, WCFlush},
		{"flush/qp-without-flush-persistent", AccessFlushGlobal, func(e env) SendWR { return flushWR(1, e.mb, 0, 8, FlushPersistent, FlushRange) },
			RemInvReqErr, wire.NAKInvalidReq, EventQPReqErr, WCFlush},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			e := env{p: p, mb: p.reg(p.pb, 4096)}
			acc := c.qpAcc
			if acc == 0 {
				acc = a19Access
			}
			setQPAccess(t, p.qb, AccessLocalWrite|acc)
			w := p.tap()
			post(t, p.qa, c.wr(e))
			checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, c.status, c.op)
			expectState(t, p.qa, StateErr)
			expectState(t, p.qb, StateErr)
			first, last := w.requestPSNs(t, p.da)
			w.expectNAK(t, p.db, c.nak, first, last)
			if ev := expectEvent(t, p.db, c.event); ev.QP != p.qb {
				t.Fatal("event for the wrong QP")
			}
			if word(e.mb.Buf(), 0) != 0 {
				t.Error("a refused request changed memory")
			}
		})
	}
}

// TestA19Duplicates: the response to an ATOMIC_WRITE or FLUSH is lost; the
// requester retries after its ACK timeout and the responder, finding the
// request in its replay table, answers again without executing again: the
// retried ATOMIC_WRITE does not overwrite what the responder's host stored
// into the word in the meantime.
func TestA19Duplicates(t *testing.T) {
	for _, c := range []struct {
		name string
		wr   func(mb *MR) SendWR
		op   wire.Opcode
		wc   WCOpcode
	}{
		{"atomic-write", func(mb *MR) SendWR { return atomicWR(1, mb, 64, 0x1111) }, wire.RCAtomicWrite, WCAtomicWrite},
		{"flush", func(mb *MR) SendWR { return flushWR(1, mb, 64, 8, FlushGlobal, FlushRange) }, wire.RCFlush, WCFlush},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{timeout: 8}) // about 1 ms ACK timeout
			mb := p.reg(p.pb, 4096)
			w := p.tap()
			dropped := make(chan struct{})
			var once atomic.Bool
			w.setDrop(func(tp *tapped) bool {
				if tp.op == wire.RCReadResponseOnly && once.CompareAndSwap(false, true) {
					close(dropped)
					return true
				}
				return false
			})
			dupsBefore := p.db.Stats().RxDuplicate.Load()
			post(t, p.qa, c.wr(mb))
			<-dropped
			// The host behind the responder stores into the word after the
			// ATOMIC_WRITE was executed, before its retry arrives.
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&mb.Buf()[64])), 0x2222)
			checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, c.wc)
			if got := word(mb.Buf(), 64); got != 0x2222 {
				t.Errorf("word = %#x: the retried request was executed again", got)
			}
			reqs := w.all(both(from(p.da), func(tp *tapped) bool { return tp.op == c.op }))
			resps := w.all(both(from(p.db), func(tp *tapped) bool { return tp.op == wire.RCReadResponseOnly }))
			if len(reqs) < 2 || len(resps) != len(reqs) || reqs[0].psn != reqs[1].psn || resps[1].psn != reqs[0].psn {
				t.Errorf("requests %+v, responses %+v: want the request twice at one PSN, each answered", reqs, resps)
			}
			if n := p.db.Stats().RxDuplicate.Load() - dupsBefore; n == 0 {
				t.Error("the responder counted no duplicate")
			}
			expectState(t, p.qa, StateRTS)
			expectState(t, p.qb, StateRTS)
		})
	}
}

// TestA19Lossy: ATOMIC_WRITEs of increasing values to one word, with
// WRITEs and FLUSHes between them, over a network that loses, duplicates
// and reorders packets. Retries and duplicates are answered from the
// replay table, never executed again, so a reader on the responder's host
// sees the word only grow, and it ends at the last value.
func TestA19Lossy(t *testing.T) {
	p := newPair(t, pairOpts{faults: loop.Faults{Loss: 0.08, Duplicate: 0.05, Reorder: 0.05}, seed: 11, timeout: 10})
	ma, mb := p.reg(p.pa, 1<<16), p.reg(p.pb, 1<<16)
	for i := range ma.Buf() {
		ma.Buf()[i] = byte(i * 7)
	}
	stop := make(chan struct{})
	bad := make(chan uint64, 1)
	go func() {
		var last uint64
		for {
			select {
			case <-stop:
				close(bad)
				return
			default:
			}
			v := word(mb.Buf(), 0)
			if v < last {
				bad <- v
				close(bad)
				return
			}
			last = v
		}
	}()
	const batches, per = 12, 16
	v := uint64(0)
	for b := range batches {
		var wrs []SendWR
		for i := range per {
			v++
			wrs = append(wrs, atomicWR(v, mb, 0, v))
			if i%4 == 0 {
				off := (b*per + i) % 60 * 1024
				wrs = append(wrs, SendWR{ID: 1 << 32, Opcode: WRRDMAWrite, SGL: []SGE{ma.SGE(off, 1024)}, RemoteAddr: mb.Addr() + uint64(off) + 4096, RKey: mb.RKey()})
			}
		}
		wrs = append(wrs, flushWR(1<<33, mb, 0, 1<<16, FlushGlobal, FlushRange))
		post(t, p.qa, wrs...)
		for i, wc := range waitWC(t, p.ca, per+1, 30*time.Second) {
			if wc.Status != Success {
				t.Fatalf("batch %d completion %d: %+v", b, i, wc)
			}
		}
	}
	close(stop)
	if v, ok := <-bad; ok {
		t.Fatalf("the word went back to %d: an old ATOMIC_WRITE was executed again", v)
	}
	if got := word(mb.Buf(), 0); got != v {
		t.Errorf("word = %d, want %d", got, v)
	}
	if !bytes.Equal(mb.Buf()[4096:4096+1024], ma.Buf()[:1024]) {
		t.Error("WRITE data differs")
	}
	st := p.net.Stats()
	t.Logf("net faults: %+v; responder duplicates %d", st, p.db.Stats().RxDuplicate.Load())
}

// BenchmarkA19Latency: one signaled ATOMIC_WRITE or FLUSH (global, 4 KiB
// range) at a time, posted and polled to completion: the round trip of
// each, over link/loop and UDP on loopback; FETCH_AND_ADD for comparison.
func BenchmarkA19Latency(b *testing.B) {
	for _, net := range []string{"loop", "udp4"} {
		for _, op := range []string{"atomic_write", "flush", "fetch_add"} {
			b.Run(net+"/"+op, func(b *testing.B) {
				p := benchPair(b, net)
				ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 8192)
				var wr []SendWR
				switch op {
				case "atomic_write":
					wr = []SendWR{atomicWR(1, mb, 8, 42)}
				case "flush":
					wr = []SendWR{flushWR(1, mb, 4096, 4096, FlushGlobal, FlushRange)}
				default:
					wr = []SendWR{{ID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8)},
						RemoteAddr: mb.Addr(), RKey: mb.RKey(), CompareAdd: 1}}
				}
				wc := make([]WC, 1)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := p.qa.PostSend(wr); err != nil {
						b.Fatal(err)
					}
					pollWait(b, p.ca, wc)
					if wc[0].Status != Success {
						b.Fatal(wc[0].Status)
					}
				}
			})
		}
	}
}
