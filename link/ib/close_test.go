package ib

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
)

// closeOrderPort is a fakePort that records how many frames were sent
// when it was closed.
type closeOrderPort struct {
	fakePort
	sentAtClose int
	closed      bool
}

func (p *closeOrderPort) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sentAtClose, p.closed = len(p.sent), true
	return nil
}

// TestCloseWaitsForReceive: a handler still running when Close is called
// sends its answer before the port closes, as verbs sends the ACK of a
// packet whose completion the application saw and after which it closed
// (the peer's last send would otherwise retry into a closed port); a
// receive call after Close delivers nothing.
func TestCloseWaitsForReceive(t *testing.T) {
	fp := &closeOrderPort{fakePort: fakePort{attr: testAttr()}}
	l, err := New(fp)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	delivered := 0
	sendErr := make(chan error, 1)
	if err := l.Start(link.HandlerFunc(func(batch []*link.Packet) {
		delivered += len(batch)
		if delivered > 1 {
			return
		}
		close(entered)
		<-release
		p := link.Get()
		defer link.Put(p)
		p.N = copy(p.Buf, transport(t, rcSend(0xFFFF, 0x11), nil))
		p.IB = link.IBAddr{DLID: 0x50}
		sendErr <- l.Send([]*link.Packet{p})
	})); err != nil {
		t.Fatal(err)
	}
	in := frame(t, 0, 0x40, rcSend(0xFFFF, 0x11))
	recvDone := make(chan struct{})
	go func() { fp.recv([][]byte{in}); close(recvDone) }()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a receive call was in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-recvDone
	if err := <-sendErr; err != nil {
		t.Fatalf("the handler's send during Close: %v", err)
	}
	fp.mu.Lock()
	sent, atClose, isClosed := len(fp.sent), fp.sentAtClose, fp.closed
	fp.mu.Unlock()
	if !isClosed || sent != 1 || atClose != 1 {
		t.Fatalf("port closed %v with %d of %d frames sent", isClosed, atClose, sent)
	}
	fp.recv([][]byte{in})
	if delivered != 1 {
		t.Errorf("%d packets delivered, the one after Close among them", delivered)
	}
	if err := l.Close(); err == nil {
		t.Error("second Close succeeded")
	}
}
