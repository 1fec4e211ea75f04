//go:build !linux

// The receive path where recvmmsg is not available to call directly: x/net's
// ReadBatch, which reads one datagram per call there and allocates a source
// address per datagram.

package udp

import (
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// sendFlags are the flags of every sendmmsg (see recv_linux.go).
const sendFlags = 0

// rxState is one socket's receive state: here only the Handler, since Poll
// receives nothing.
type rxState struct{ h link.Handler }

func (l *Link) newRx(_ *socket, h link.Handler) (*rxState, error) { return &rxState{h: h}, nil }

// pollSocket receives nothing: only the reader goroutine receives here.
func (l *Link) pollSocket(*socket) int { return 0 }

// readLoop is the receive path of one socket, run by its reader goroutine
// until the socket is closed.
func (l *Link) readLoop(sk *socket, rx *rxState) {
	defer l.wg.Done()
	h := rx.h
	n := l.batch
	msgs := make([]ipv4.Message, n)
	bufs := make([][]byte, n)
	pkts := make([]*link.Packet, n)
	ok := make([]bool, n)
	batch := make([]*link.Packet, 0, n)
	for i := range msgs {
		pkts[i] = link.Get()
		msgs[i].Buffers = bufs[i : i+1 : i+1]
	}
	defer func() {
		for _, p := range pkts {
			link.Put(p)
		}
	}()
	var errs int
	var icrc wire.ICRCCache
	for {
		for i := range msgs {
			bufs[i] = pkts[i].Buf[:link.BufSize]
			msgs[i].Addr = nil
		}
		k, err := sk.bc.ReadBatch(msgs, 0)
		if err != nil {
			if l.readFailed(sk, err, &errs) {
				return
			}
			continue
		}
		l.ctr.RxCalls.Add(1)
		for i := range k {
			var src netip.AddrPort
			if ua, isUDP := msgs[i].Addr.(*net.UDPAddr); isUDP {
				if a, valid := netip.AddrFromSlice(ua.IP); valid {
					a = a.Unmap()
					if ua.Zone != "" && a.Is6() {
						a = a.WithZone(ua.Zone)
					}
					src = netip.AddrPortFrom(a, uint16(ua.Port))
				}
			}
			ok[i] = l.accept(sk, &icrc, pkts[i], msgs[i].N, src)
		}
		batch = l.deliver(h, pkts[:k], ok[:k], batch)
		for i := range k {
			pkts[i] = link.Get()
		}
	}
}

// enableGRO: coalesced receives are Linux's.
func enableGRO(syscall.Conn) bool { return false }

func groOverflow() []byte { return nil }
