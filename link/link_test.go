package link_test

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/link"
)

// TestGetIsEmpty checks that a pool packet comes back with no bytes and no
// endpoints, whatever it held when it was put back: a sender that sets only
// Dst must not inherit a stale Src (the link would refuse the packet or send
// it from the wrong address).
func TestGetIsEmpty(t *testing.T) {
	src := netip.MustParseAddrPort("127.0.0.1:4791")
	dst := netip.MustParseAddrPort("[::1]:4791")
	for i := range 100 {
		p := link.Get()
		if p.N != 0 || p.Src.IsValid() || p.Dst.IsValid() {
			t.Fatalf("Get %d: N %d, Src %v, Dst %v; want an empty packet", i, p.N, p.Src, p.Dst)
		}
		if len(p.Buf) != link.BufSize {
			t.Fatalf("Get %d: buffer of %d bytes, want %d", i, len(p.Buf), link.BufSize)
		}
		p.N, p.Src, p.Dst = 10, src, dst
		link.Put(p)
	}
}

// TestClone: a clone holds the packet's bytes, endpoints and traffic class
// in a buffer of its own.
func TestClone(t *testing.T) {
	p := link.Get()
	p.N = copy(p.Buf, "roce")
	p.Src = netip.MustParseAddrPort("127.0.0.1:1")
	p.Dst = netip.MustParseAddrPort("127.0.0.2:4791")
	p.TClass = 0xba
	q := link.Clone(p)
	if string(q.Data()) != "roce" || q.Src != p.Src || q.Dst != p.Dst || q.TClass != 0xba {
		t.Fatalf("clone %q %v %v %#x", q.Data(), q.Src, q.Dst, q.TClass)
	}
	p.Buf[0] = 'X'
	if q.Buf[0] != 'r' {
		t.Error("the clone shares the packet's buffer")
	}
	link.Put(p)
	link.Put(q)
}

// TestFlatten: a packet whose payload lies outside its buffer (Ext) is made
// whole by Flatten, in place, and by Clone, in the copy, leaving the
// original as it was; a packet without Ext is left alone.
func TestFlatten(t *testing.T) {
	whole := make([]byte, 300)
	for i := range whole {
		whole[i] = byte(i*5 + 1)
	}
	split := func() *link.Packet {
		p := link.Get()
		p.N = copy(p.Buf, whole[:40])
		p.N += copy(p.Buf[p.N:], whole[293:]) // pad and ICRC behind the headers
		p.Ext, p.ExtAt = whole[40:293], 40
		return p
	}
	p := split()
	if p.Len() != len(whole) {
		t.Fatalf("Len %d, want %d", p.Len(), len(whole))
	}
	q := link.Clone(p)
	if q.Ext != nil || string(q.Data()) != string(whole) {
		t.Fatalf("Clone: Ext %v, %d bytes differ from the packet's", q.Ext != nil, q.N)
	}
	if p.Ext == nil || p.N != 47 {
		t.Fatal("Clone changed the packet it copied")
	}
	p.Flatten()
	if p.Ext != nil || p.ExtAt != 0 || string(p.Data()) != string(whole) {
		t.Fatalf("Flatten: Ext %v, %d bytes differ from the packet's", p.Ext != nil, p.N)
	}
	p.Flatten()
	if string(p.Data()) != string(whole) {
		t.Fatal("Flatten changed a packet without Ext")
	}
	link.Put(p)
	link.Put(q)
}
