package udp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/link/linktest"
)

// TestWriteMsgs writes messages with the direct sendmmsg, from IPv4 and
// IPv6 sockets: each arrives at its destination as the concatenation of
// its buffers (empty ones skipped), from the link's socket.
func TestWriteMsgs(t *testing.T) {
	linktest.NoLeaks(t)
	for _, addr := range []netip.Addr{lo1, lo6} {
		t.Run(addr.String(), func(t *testing.T) {
			l := open(t, Config{Addrs: []netip.Addr{addr}})
			sk := l.socks[0]
			if _, ok := sk.bc.(*sysConn); !ok {
				t.Fatalf("socket's batchConn is %T, want *sysConn", sk.bc)
			}
			dst := rawConn(t, addr)
			to := dst.LocalAddr().(*net.UDPAddr)
			want := [][]byte{[]byte("one datagram"), []byte("head|payload|tail")}
			msgs := []ipv4.Message{
				{Buffers: [][]byte{want[0]}, Addr: to},
				{Buffers: [][]byte{[]byte("head|"), nil, []byte("payload|"), []byte("tail")}, Addr: to},
			}
			s := new(sendScratch)
			n, err := l.writeMsgs(sk, s, msgs)
			s.sys.release()
			if n != len(msgs) || err != nil {
				t.Fatalf("writeMsgs: %d, %v", n, err)
			}
			buf := make([]byte, 100)
			dst.SetReadDeadline(time.Now().Add(5 * time.Second))
			for i, w := range want {
				k, from, err := dst.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf[:k], w) || from.Port() != l.Port() || from.Addr().Unmap() != addr {
					t.Errorf("datagram %d: %q from %v, want %q from %v", i, buf[:k], from, w, netip.AddrPortFrom(addr, l.Port()))
				}
			}
			for _, h := range s.sys.hdrs {
				if h.hdr.Iov != nil || h.hdr.Name != nil {
					t.Errorf("released headers still point at buffers: %+v", h.hdr)
				}
			}
		})
	}
}

// TestWriteMsgsZone: fill gives a destination with an IPv6 zone its
// interface's index (a name or a number), leaves one whose zone names no
// interface to x/net, and a closed socket's write fails with net.ErrClosed.
func TestWriteMsgsZone(t *testing.T) {
	var x sysScratch
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, zone := range []string{"lo", strconv.Itoa(lo.Index)} {
		zoned := []ipv4.Message{{Buffers: [][]byte{{1}}, Addr: &net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 4791, Zone: zone}}}
		if !x.fill(zoned, false) {
			t.Fatalf("fill refused zone %q", zone)
		}
		if sa := x.names[0]; sa.Scope_id != uint32(lo.Index) || sa.Family != unix.AF_INET6 {
			t.Errorf("zone %q: sockaddr %+v, want scope %d", zone, sa, lo.Index)
		}
	}
	unknown := []ipv4.Message{{Buffers: [][]byte{{1}}, Addr: &net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 4791, Zone: "no-such-interface0"}}}
	if x.fill(unknown, false) {
		t.Error("fill took a zone that names no interface")
	}
	plain := []ipv4.Message{{Buffers: [][]byte{{1}}, Addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4791}}}
	if !x.fill(plain, true) || len(x.hdrs) != 1 || x.hdrs[0].hdr.Namelen != 16 {
		t.Errorf("fill: %+v", x)
	}

	l := open(t, Config{Addrs: []netip.Addr{lo1}})
	sk := l.socks[0]
	sk.conn.Close()
	s := new(sendScratch)
	if _, err := l.writeMsgs(sk, s, plain); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write on a closed socket: %v, want net.ErrClosed", err)
	}
}

// TestWriteMsgsErrno: an error of the direct sendmmsg reaches the caller
// as one that errors.Is finds (write's GSO fallback and link-down checks
// rely on it): a datagram larger than UDP allows fails with EMSGSIZE, and
// none is counted sent.
func TestWriteMsgsErrno(t *testing.T) {
	l := open(t, Config{Addrs: []netip.Addr{lo1}})
	sk := l.socks[0]
	dst := rawConn(t, lo1).LocalAddr().(*net.UDPAddr)
	msgs := []ipv4.Message{{Buffers: [][]byte{make([]byte, 70000)}, Addr: dst}}
	s := new(sendScratch)
	n, err := l.writeMsgs(sk, s, msgs)
	s.sys.release()
	if n != 0 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("writeMsgs of 70,000 bytes: %d, %v; want 0 and EMSGSIZE", n, err)
	}
}

// TestWriteMsgsChunks: one sendmmsg carries at most rawSendMax bytes (it
// runs without the scheduler's knowledge) and at least one message, and the
// caller's loop sends the rest.
func TestWriteMsgsChunks(t *testing.T) {
	const size = 60000
	per := rawSendMax / size
	l := open(t, Config{Addrs: []netip.Addr{lo1}})
	sk := l.socks[0]
	dst := rawConn(t, lo1).LocalAddr().(*net.UDPAddr)
	msgs := make([]ipv4.Message, 2*per+1)
	for i := range msgs {
		msgs[i] = ipv4.Message{Buffers: [][]byte{make([]byte, size/2), make([]byte, size-size/2)}, Addr: dst}
	}
	s := new(sendScratch)
	var calls []int
	for done := 0; done < len(msgs); {
		n, err := l.writeMsgs(sk, s, msgs[done:])
		if err != nil || n <= 0 {
			t.Fatalf("writeMsgs after %d: %d, %v", done, n, err)
		}
		calls = append(calls, n)
		done += n
	}
	s.sys.release()
	if want := []int{per, per, 1}; !slices.Equal(calls, want) {
		t.Errorf("messages a call %v, want %v", calls, want)
	}
	// A message larger than the bound still goes, alone.
	var x sysScratch
	big := []ipv4.Message{{Buffers: [][]byte{make([]byte, rawSendMax+1)}, Addr: dst}, msgs[0]}
	if !x.fill(big, true) || len(x.hdrs) != 1 {
		t.Errorf("fill of a message over the bound: %d headers, want 1", len(x.hdrs))
	}
}
