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
