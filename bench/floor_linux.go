//go:build linux

package main

// The kernel's share of a busy-poll round trip. softrdma's polling WRITE
// round trip (perf write_lat) is measured against pingpong's spinning UDP
// round trip, which sends one 64-byte datagram with write() on a connected
// socket and takes it with recvfrom(). A RoCE ping-pong cannot make those
// calls: each side sends its 96-byte WRITE packet and the 20-byte ACK of
// the peer's as one segmented datagram (sendmsg with a UDP_SEGMENT control
// message) from its QP's source-port socket, connected to the peer (link/udp
// follows the IPv4 Identification counter such a socket numbers its
// datagrams with, which the ICRC covers), and receives with recvmsg (link/udp
// asks for one message a call in a ping-pong, and makes one message's
// receives and sends with recvmsg and sendmsg), UDP_GRO on and an overflow
// buffer behind each packet's. "udpfloor
// -connect" makes exactly those calls with nothing else between them (from
// one socket, which also receives), so its round trip is the least
// softrdma's can be on this kernel: the table reports softrdma against it
// beside the raw reference, splitting the difference into the kernel's part
// and softrdma's own. Without -connect it sends from an unconnected socket,
// as softrdma did before it connected its source-port sockets: the route
// lookup a send that saves.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The floor's datagrams: a 64-byte RDMA WRITE Only packet (BTH, RETH,
// payload, ICRC) and an ACK (BTH, AETH, ICRC), as softrdma sends them.
const (
	floorWrite = 12 + 16 + 64 + 4
	floorAck   = 12 + 4 + 4
	floorEnd   = 1 // the client's last datagram: the server stops
)

// floorSock is one side's socket and its send and receive headers.
type floorSock struct {
	fd   int
	dst  unix.RawSockaddrInet4
	out  []byte
	siov [2]unix.Iovec
	scm  []byte
	send unix.Msghdr
	end  unix.Msghdr
	// receive: a packet buffer and an overflow buffer, a control buffer
	// for UDP_GRO's segment size and a source address slot, as softrdma's
	// receiver has for each message.
	buf, over, ctrl []byte
	riov            [2]unix.Iovec
	name            unix.RawSockaddrInet6
	rmsg            unix.Msghdr
}

func newFloorSock(bind, peer netip.AddrPort, connect bool) (*floorSock, error) {
	if !bind.Addr().Is4() || !peer.Addr().Is4() {
		return nil, errors.New("udpfloor: IPv4 addresses only")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("udpfloor: socket: %w", err)
	}
	s := &floorSock{fd: fd}
	// Don't Fragment, as softrdma's sockets (an unconnected DF datagram
	// has IPv4 Identification 0), and coalesced receives.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		s.close()
		return nil, fmt.Errorf("udpfloor: IP_MTU_DISCOVER: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		s.close()
		return nil, fmt.Errorf("udpfloor: UDP_GRO: %w", err)
	}
	sa := &unix.SockaddrInet4{Port: int(bind.Port()), Addr: bind.Addr().As4()}
	if err := unix.Bind(fd, sa); err != nil {
		s.close()
		return nil, fmt.Errorf("udpfloor: bind %v: %w", bind, err)
	}
	s.dst = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: peer.Addr().As4()}
	s.dst.Port = peer.Port()>>8 | peer.Port()<<8 // network order
	if connect {
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()}); err != nil {
			s.close()
			return nil, fmt.Errorf("udpfloor: connect %v: %w", peer, err)
		}
	}
	s.out = make([]byte, floorWrite+floorAck)
	s.siov[0] = unix.Iovec{Base: &s.out[0]}
	s.siov[0].SetLen(floorWrite)
	s.siov[1] = unix.Iovec{Base: &s.out[floorWrite]}
	s.siov[1].SetLen(floorAck)
	s.scm = make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&s.scm[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&s.scm[unix.CmsgLen(0)])) = floorWrite
	s.send = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&s.dst)), Namelen: unix.SizeofSockaddrInet4, Iov: &s.siov[0], Control: &s.scm[0]}
	s.send.SetIovlen(2)
	s.send.SetControllen(len(s.scm))
	if connect {
		s.send.Name, s.send.Namelen = nil, 0
	}
	s.end = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&s.dst)), Namelen: unix.SizeofSockaddrInet4, Iov: &s.siov[0]}
	s.end.SetIovlen(1)
	s.buf, s.over, s.ctrl = make([]byte, 4096+128), make([]byte, 65536), make([]byte, 64)
	return s, nil
}

func (s *floorSock) close() { unix.Close(s.fd) }

// sendPair sends the WRITE and the ACK as one segmented datagram.
func (s *floorSock) sendPair() error {
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_SENDMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.send)), 0, 0, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR, unix.EAGAIN:
			continue
		}
		return fmt.Errorf("udpfloor: sendmsg: %w", e)
	}
}

// sendEnd tells the server to stop.
func (s *floorSock) sendEnd() {
	s.siov[0].SetLen(floorEnd)
	unix.RawSyscall6(unix.SYS_SENDMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.end)), 0, 0, 0, 0)
	s.siov[0].SetLen(floorWrite)
}

// recv spins on a non-blocking recvmsg until a datagram comes and returns
// its length, or an error once idle has passed without one (the clock is
// read every 4,096 empty polls).
func (s *floorSock) recv(idle time.Duration) (int, error) {
	deadline := time.Now().Add(idle)
	for i := 1; ; i++ {
		s.riov[0] = unix.Iovec{Base: &s.buf[0]}
		s.riov[0].SetLen(len(s.buf))
		s.riov[1] = unix.Iovec{Base: &s.over[0]}
		s.riov[1].SetLen(len(s.over))
		s.rmsg = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&s.name)), Namelen: unix.SizeofSockaddrInet6, Iov: &s.riov[0], Control: &s.ctrl[0]}
		s.rmsg.SetIovlen(2)
		s.rmsg.SetControllen(len(s.ctrl))
		k, _, e := unix.RawSyscall6(unix.SYS_RECVMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.rmsg)), unix.MSG_DONTWAIT, 0, 0, 0)
		switch {
		case e == 0:
			return int(k), nil
		case e != unix.EAGAIN && e != unix.EINTR:
			return 0, fmt.Errorf("udpfloor: recvmsg: %w", e)
		}
		if i&4095 == 0 && time.Now().After(deadline) {
			return 0, fmt.Errorf("%w for %v", errFloorIdle, idle)
		}
	}
}

var errFloorIdle = errors.New("udpfloor: nothing received")

// hello sends pairs until the server answers one (it may not have bound its
// socket yet: the datagrams before are lost, and a connected socket sees
// the refusal), or idle has passed.
func (s *floorSock) hello(idle time.Duration) error {
	deadline := time.Now().Add(idle)
	for {
		if err := s.sendPair(); err != nil && !errors.Is(err, unix.ECONNREFUSED) {
			return err
		}
		err := s.recvPair(100 * time.Millisecond)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, errFloorIdle) && !errors.Is(err, unix.ECONNREFUSED):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("udpfloor: no answer for %v", idle)
		}
	}
}

// recvPair takes the peer's WRITE and ACK: one coalesced datagram, or two.
func (s *floorSock) recvPair(idle time.Duration) error {
	for got := 0; got < floorWrite+floorAck; {
		n, err := s.recv(idle)
		if err != nil {
			return err
		}
		got += n
	}
	return nil
}

// runFloor is the "udpfloor" subcommand: with -server it answers each pair
// with a pair until the client's end datagram (or -idle without one);
// otherwise it times -n round trips after -warm and prints the median,
// p99 and p99.9 in microseconds (p50=, p99=, p99.9=).
func runFloor(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("udpfloor", flag.ContinueOnError)
	server := fs.Bool("server", false, "answer round trips")
	bind := fs.String("bind", "127.0.0.1:19120", "local address and port")
	peer := fs.String("peer", "127.0.0.2:19120", "the other side's address and port")
	n := fs.Int("n", 20000, "round trips timed (client)")
	warm := fs.Int("warm", 2000, "round trips before timing (client)")
	idle := fs.Duration("idle", 10*time.Second, "give up after this long without a datagram")
	connect := fs.Bool("connect", false, "connect the socket to -peer and send without an address, as softrdma's source-port sockets (see the top of floor_linux.go)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	la, err := netip.ParseAddrPort(*bind)
	if err != nil {
		return fmt.Errorf("udpfloor: -bind: %w", err)
	}
	ra, err := netip.ParseAddrPort(*peer)
	if err != nil {
		return fmt.Errorf("udpfloor: -peer: %w", err)
	}
	if *n < 1 || *warm < 0 {
		return errors.New("udpfloor: -n must be at least 1 and -warm at least 0")
	}
	s, err := newFloorSock(la, ra, *connect)
	if err != nil {
		return err
	}
	defer s.close()
	// One thread spins, as a polling softrdma side does.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if *server {
		for {
			got := 0
			for got < floorWrite+floorAck {
				k, err := s.recv(*idle)
				if err != nil {
					return err
				}
				if k == floorEnd {
					return nil
				}
				got += k
			}
			if err := s.sendPair(); err != nil {
				return err
			}
		}
	}
	defer s.sendEnd()
	if err := s.hello(*idle); err != nil {
		return err
	}
	rtt := make([]time.Duration, *n)
	for i := -*warm; i < *n; i++ {
		t0 := time.Now()
		if err := s.sendPair(); err != nil {
			return err
		}
		if err := s.recvPair(*idle); err != nil {
			return err
		}
		if i >= 0 {
			rtt[i] = time.Since(t0)
		}
	}
	slices.Sort(rtt)
	q := func(p float64) float64 { return float64(rtt[int(p*float64(len(rtt)-1))]) / 1e3 }
	fmt.Fprintf(out, "udpfloor n=%d p50=%.2f p99=%.2f p99.9=%.2f us\n", *n, q(0.5), q(0.99), q(0.999))
	return nil
}
