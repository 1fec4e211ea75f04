package rdmacm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestAcceptControl is a server in librdmacm's model: memory registered
// in a shared PD before any connection, requests inspected, receives
// posted before accepting, the region's key sent in the REP's private
// data, a request rejected with a reason and private data, and the
// server sleeping on its completion channel.
func TestAcceptControl(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	db := h.b.devices()[0]
	spd, err := db.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	smr, err := spd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	cc := db.CreateCompChannel()
	l, err := Listen(ctx, netip.AddrPortFrom(ipB, 7471),
		&ConnOptions{CM: h.b, PD: spd, CompChannel: cc, AcceptControl: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Accept(ctx); !errors.Is(err, ErrState) {
		t.Errorf("Accept on a listener with AcceptControl: %v, want ErrState", err)
	}

	type dialed struct {
		c   *Conn
		err error
	}
	dial := func(pd string) chan dialed {
		out := make(chan dialed, 1)
		go func() {
			c, err := Dial(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.a, Param: ConnParam{PrivateData: []byte(pd)}})
			out <- dialed{c, err}
		}()
		return out
	}
	// The server's answer to "key": the region's address and rkey.
	serve := func() (*Conn, *Request) {
		t.Helper()
		r, err := l.Request(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.PeerAddr().Addr() != ipA || r.Device() != db {
			t.Fatalf("request from %v on %v", r.PeerAddr(), r.Device().Name())
		}
		if !bytes.HasPrefix(r.Peer().PrivateData, []byte("key")) {
			return nil, r
		}
		c, err := r.Prepare(nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.PD != spd || c.QP.State() != verbs.StateInit {
			t.Fatalf("prepared connection: PD shared %v, QP %v", c.PD == spd, c.QP.State())
		}
		if err := c.QP.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{smr.SGE(2048, 64)}}}); err != nil {
			t.Fatal(err)
		}
		key := binary.BigEndian.AppendUint64(nil, smr.Addr())
		key = binary.BigEndian.AppendUint32(key, uint32(smr.RKey()))
		if _, err := r.Accept(ctx, &ConnParam{PrivateData: key}); err != nil {
			t.Fatal(err)
		}
		return c, r
	}

	// A request the server refuses.
	d := dial("no")
	_, r := serve()
	if err := r.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Accept(ctx, nil); !errors.Is(err, ErrState) {
		t.Errorf("Accept after Reject: %v, want ErrState", err)
	}
	res := <-d
	var ev *ErrEvent
	if !errors.Is(res.err, ErrRejected) || !errors.As(res.err, &ev) || ev.RejectReason() != RejectConsumer {
		t.Fatalf("rejected Dial: %v", res.err)
	}
	if !strings.Contains(res.err.Error(), "the server refused it (reason 28)") ||
		!bytes.HasPrefix(ev.Event.PrivateData(), []byte("go away")) {
		t.Errorf("rejection reads %q with private data %q", res.err, ev.Event.PrivateData())
	}

	// Two connections share the server's PD and its region.
	var clients, servers []*Conn
	for i := range 2 {
		d := dial("key")
		s, _ := serve()
		res := <-d
		if res.err != nil {
			t.Fatal(res.err)
		}
		c := res.c
		clients, servers = append(clients, c), append(servers, s)
		addr := binary.BigEndian.Uint64(c.Peer.PrivateData)
		rkey := wire.RKey(binary.BigEndian.Uint32(c.Peer.PrivateData[8:]))
		src, err := c.PD.RegMR([]byte{byte('A' + i), 'x'}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A WRITE into the shared region, then a SEND into the receive
		// posted before the connection was accepted.
		if err := s.CQ.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		err = c.QP.PostSend([]verbs.SendWR{
			{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 1)}, RemoteAddr: addr + uint64(i), RKey: rkey},
			{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 2)}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cc.Get(ctx); err != nil || got != s.CQ {
			t.Fatalf("completion channel: %v %v", got, err)
		}
		var wc [1]verbs.WC
		if n, err := s.CQ.Wait(ctx, wc[:]); n != 1 || wc[0].Err() != nil || wc[0].WRID != 9 {
			t.Fatalf("server receive: %+v %v", wc[0], err)
		}
		if n, err := c.CQ.Wait(ctx, wc[:]); n != 1 || wc[0].Err() != nil || wc[0].WRID != 2 {
			t.Fatalf("client send: %+v %v", wc[0], err)
		}
		src.Dereg()
	}
	if servers[0].PD != servers[1].PD {
		t.Error("the server's connections have different PDs")
	}
	if got := string(smr.Buf()[:2]); got != "AB" {
		t.Errorf("the shared region holds %q, want \"AB\"", got)
	}
	for i := range clients {
		clients[i].Close()
		servers[i].Close()
	}
	// The PD and the channel's CQs stay the caller's.
	if err := smr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := spd.Dealloc(); err != nil {
		t.Fatalf("the caller's PD after its connections closed: %v", err)
	}
}

// TestDialOwnResources dials with the caller's PD and two CQs, and checks
// the misuse errors.
func TestDialOwnResources(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	l, err := Listen(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.b})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Request(ctx); !errors.Is(err, ErrState) {
		t.Errorf("Request on a listener without AcceptControl: %v, want ErrState", err)
	}
	da := h.a.devices()[0]
	pd, _ := da.AllocPD()
	scq, _ := da.CreateCQ(8, nil)
	rcq, _ := da.CreateCQ(8, nil)
	c, err := Dial(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.a, PD: pd, SendCQ: scq, RecvCQ: rcq})
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.PD != pd || c.CQ != scq || c.RecvCQ != rcq || s.CQ != s.RecvCQ {
		t.Fatal("Dial did not use the given PD and CQs")
	}
	exchange(t, c, s, []byte("to the server"))
	exchange(t, s, c, []byte("to the client")) // c's receive completes on rcq
	if n := scq.Poll(make([]verbs.WC, 2)); n != 0 {
		t.Errorf("%d completions left on the send CQ", n)
	}
	c.Close()
	s.Close()
	for _, err := range []error{scq.Destroy(), rcq.Destroy(), pd.Dealloc()} {
		if err != nil {
			t.Errorf("the caller's objects after Close: %v", err)
		}
	}

	// A PD of another device cannot serve the connection.
	other, _ := h.b.devices()[0].AllocPD()
	defer other.Dealloc()
	if _, err := Dial(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.a, PD: other}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Dial with another device's PD: %v, want ErrInvalid", err)
	}
	// Nobody listens on 7472: the error says so.
	_, err = Dial(ctx, netip.AddrPortFrom(ipB, 7472), &ConnOptions{CM: h.a})
	var ev *ErrEvent
	if !errors.As(err, &ev) || ev.RejectReason() != RejectNoListener ||
		err.Error() != "rdmacm: connection rejected: no server listens on that port (reason 8)" {
		t.Errorf("Dial to a port nobody listens on: %v", err)
	}
}
