// softrdma cmatose and udaddy: librdmacm's connection tests. cmatose
// connects RC QPs (TCP port space) and exchanges SENDs both ways; udaddy
// resolves UD QPs with SIDR (UDP port space) and exchanges datagrams. Both
// take the same flags as the C tools and print the same progress lines.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

type cmaTest struct {
	name          string // "cmatose" or "udaddy"
	ud            bool
	conns         int
	size, count   int
	out           io.Writer
	ch            *rdmacm.EventChannel
	nodes         []*cmaNode
	connIndex     int
	connectLeft   int
	discLeft      int
	tos           uint8 // -t
	setTOS        bool
	ackTimeout    uint8 // -a
	setACKTimeout bool
	migrate       bool // -m
}

type cmaNode struct {
	id         *rdmacm.ID
	connected  bool
	pd         *verbs.PD
	sendCQ     *verbs.CQ
	recvCQ     *verbs.CQ
	mr         *verbs.MR
	mem        []byte
	ah         *verbs.AH
	remoteQPN  wire.QPN
	remoteQKey wire.QKey
}

func runCmatose(ctx context.Context, args []string, out io.Writer) error {
	return runCMATest(ctx, "cmatose", args, out)
}

func runUdaddy(ctx context.Context, args []string, out io.Writer) error {
	return runCMATest(ctx, "udaddy", args, out)
}

func runCMATest(ctx context.Context, name string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	dst := fs.String("s", "", "server address (client mode); without it, run the server")
	bind := fs.String("b", "", "bind address")
	conns := fs.Int("c", 1, "connections")
	count := fs.Int("C", 10, "message count")
	size := fs.Int("S", 100, "message size")
	tosFlag := fs.String("t", "", "type of service of the client's connections: the IP TOS / traffic class byte, decimal or 0x hex (rdma_set_option RDMA_OPTION_ID_TOS)")
	fs.String("f", "ip", "address format (ip or name)")
	var ackFlag *string
	migrate := new(bool)
	if name == "cmatose" {
		migrate = fs.Bool("m", false, "after the data transfers, move every ID (and the server's listener) to a new event channel and go on there (rdma_migrate_id)")
		ackFlag = fs.String("a", "", "local ACK timeout of each QP, 0 to 31 (4.096 us * 2^N), on either side (rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT); default: rdma_cm's")
	}
	var port *string
	if name == "udaddy" {
		fs.String("P", "udp", "port space (udp)")
		fs.String("p", "", "port space, for compatibility (udaddy always uses port 7174)")
		fixed := "7174"
		port = &fixed
	} else {
		fs.String("P", "tcp", "port space (tcp)")
		port = fs.String("p", "7471", "port number")
	}
	df := addDevFlags(fs, true)
	what := "ucmatose: RC connections over rdma_cm exchanging SENDs, with ucmatose's flags and output."
	if name == "udaddy" {
		what = "udaddy: UD QPs resolved with SIDR exchanging datagrams, with udaddy's flags and output."
	}
	fs.Usage = usageFunc(fs, name+" [flags]              (server)\n"+name+" -s SERVER [flags]    (client)", what)
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	var p uint16
	if _, err := fmt.Sscan(*port, &p); err != nil {
		return fmt.Errorf("port %q: %v", *port, err)
	}
	if *conns < 1 || *count < 0 || *size < 0 {
		return errors.New("invalid connections, count or size")
	}
	t := &cmaTest{name: name, ud: name == "udaddy", conns: *conns, size: *size, count: *count, out: out,
		ch: rdmacm.NewEventChannel(), connectLeft: *conns}
	if *tosFlag != "" {
		v, err := strconv.ParseUint(*tosFlag, 0, 8)
		if err != nil {
			return fmt.Errorf("type of service %q: want 0 to 255", *tosFlag)
		}
		t.tos, t.setTOS = uint8(v), true
	}
	if ackFlag != nil && *ackFlag != "" {
		v, err := strconv.ParseUint(*ackFlag, 0, 8)
		if err != nil || v > 31 {
			return fmt.Errorf("ACK timeout %q: want 0 to 31", *ackFlag)
		}
		t.ackTimeout, t.setACKTimeout = uint8(v), true
	}
	t.migrate = *migrate
	if t.size == 0 {
		t.count = 0
	}
	var ret error
	if *dst != "" {
		ret = t.runClient(ctx, *bind, *dst, p, df)
	} else {
		ret = t.runServer(ctx, *bind, p, df)
	}
	fmt.Fprintln(out, "test complete")
	t.destroyNodes()
	status := 0
	if ret != nil {
		status = -1
		fmt.Fprintf(out, "%s: %v\n", name, ret)
	}
	fmt.Fprintf(out, "return status %d\n", status)
	if ret != nil {
		return errors.New("test failed")
	}
	return nil
}

func (t *cmaTest) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }

func (t *cmaTest) ps() rdmacm.PortSpace {
	if t.ud {
		return rdmacm.PortSpaceUDP
	}
	return rdmacm.PortSpaceTCP
}

func (t *cmaTest) initNode(n *cmaNode) error {
	dev := n.id.Device()
	if t.ud && t.count > 0 {
		pa, _ := dev.QueryPort(1)
		if t.size > pa.ActiveMTU.Bytes() {
			return fmt.Errorf("message_size %d is larger than active mtu %d", t.size, pa.ActiveMTU.Bytes())
		}
	}
	var err error
	if n.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	cqe := max(t.count, 1)
	if t.ud {
		cqe = max(2*t.count, 2)
	}
	if n.sendCQ, err = dev.CreateCQ(cqe, nil); err != nil {
		return err
	}
	n.recvCQ = n.sendCQ
	if !t.ud {
		if n.recvCQ, err = dev.CreateCQ(cqe, nil); err != nil {
			return err
		}
	}
	wr := max(t.count, 1)
	if _, err := n.id.CreateQP(n.pd, verbs.QPInitAttr{SendCQ: n.sendCQ, RecvCQ: n.recvCQ, SQSigAll: !t.ud,
		Cap: verbs.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("unable to create QP: %w", err)
	}
	if t.count == 0 {
		return nil
	}
	n.mem = make([]byte, t.size+grhSize(t.ud))
	n.mr, err = n.pd.RegMR(n.mem, verbs.AccessLocalWrite)
	return err
}

func grhSize(ud bool) int {
	if ud {
		return 40
	}
	return 0
}

func (t *cmaTest) postRecvs(n *cmaNode) error {
	for i := 0; i < t.count; i++ {
		if err := n.id.QP().PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{n.mr.SGE(0, len(n.mem))}}}); err != nil {
			return fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return nil
}

// postAllSends posts every node's sends (see postSends).
func (t *cmaTest) postAllSends(signaled bool) error {
	for _, n := range t.nodes {
		if err := t.postSends(n, signaled); err != nil {
			return err
		}
	}
	return nil
}

func (t *cmaTest) postSends(n *cmaNode, signaled bool) error {
	if !n.connected || t.count == 0 {
		return nil
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{n.mr.SGE(0, t.size)}}
	if t.ud {
		wr.Opcode, wr.Imm = verbs.WRSendWithImm, uint32(n.id.QP().QPN())
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = n.ah, n.remoteQPN, n.remoteQKey
	}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	for i := 0; i < t.count; i++ {
		if err := n.id.QP().PostSend([]verbs.SendWR{wr}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// pollCQs waits for count completions on each connected node's CQ.
func (t *cmaTest) pollCQs(ctx context.Context, recv bool) error {
	wcs := make([]verbs.WC, 8)
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		cq := n.sendCQ
		if recv {
			cq = n.recvCQ
		}
		for done := 0; done < t.count; {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.Success {
					return fmt.Errorf("completion status %v", wc.Status)
				}
			}
			if k > 0 && t.ud && n.ah == nil {
				if err := t.replyAH(n, &wcs[0]); err != nil {
					return err
				}
			}
			done += k
			if k == 0 {
				waitBriefly()
			}
		}
	}
	return nil
}

// replyAH builds the address handle back to a datagram's sender from its
// GRH (as ibv_create_ah_from_wc does) and takes the sender's QPN from the
// immediate data.
func (t *cmaTest) replyAH(n *cmaNode, wc *verbs.WC) error {
	g := n.mem[:40]
	var src netip.Addr
	if g[0]>>4 == 6 {
		src = netip.AddrFrom16([16]byte(g[8:24])).Unmap()
	} else {
		src = netip.AddrFrom4([4]byte(g[32:36]))
	}
	attr := verbs.AHAttr{DGID: wire.GIDFromAddr(src), SGIDIndex: n.id.SGIDIndex(), HopLimit: 64, PortNum: 1}
	if pa, err := n.id.Device().QueryPort(1); err == nil && pa.LinkLayer == verbs.LinkLayerInfiniBand {
		// By the sender's LID and SL; a GRH only if the datagram had one.
		attr = verbs.AHAttr{DLID: wc.SLID, SL: wc.SL, PortNum: 1}
		if wc.Flags&verbs.WCGRH != 0 {
			attr.IsGlobal, attr.DGID, attr.SGIDIndex, attr.HopLimit = true, wire.GIDFromAddr(src), n.id.SGIDIndex(), 64
		}
	}
	ah, err := n.pd.CreateAH(attr)
	if err != nil {
		return err
	}
	n.ah, n.remoteQPN = ah, wire.QPN(wc.Imm)
	a, _ := n.id.QP().Query()
	n.remoteQKey = a.QKey
	return nil
}

// applyACKTimeout sets -a's ACK timeout on id, as cmatose does on both
// sides (a failure is reported and the test goes on).
func (t *cmaTest) applyACKTimeout(id *rdmacm.ID) {
	if !t.setACKTimeout {
		return
	}
	if err := id.SetACKTimeout(t.ackTimeout); err != nil {
		t.printf("%s: set ack timeout option failed: %v\n", t.name, err)
	}
}

// event handles one rdma_cm event as the C tools' cma_handler does.
func (t *cmaTest) event(ctx context.Context, ev *rdmacm.Event) error {
	n, _ := ev.ID.Context.(*cmaNode)
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		if t.setTOS {
			// As the C tools: a failure is reported and the test goes on.
			if err := n.id.SetTOS(t.tos); err != nil {
				t.printf("%s: set TOS option failed: %v\n", t.name, err)
			}
		}
		t.applyACKTimeout(n.id)
		return n.id.ResolveRoute(ctx)
	case rdmacm.EventRouteResolved:
		err := t.initNode(n)
		if err == nil {
			err = t.postRecvs(n)
		}
		if err == nil {
			p := &rdmacm.ConnParam{}
			if !t.ud {
				p = &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}
			}
			err = n.id.Connect(ctx, p)
		}
		if err != nil {
			t.connectLeft--
		}
		return err
	case rdmacm.EventConnectRequest:
		return t.connectHandler(ctx, ev)
	case rdmacm.EventEstablished:
		if t.ud {
			ah, err := n.pd.CreateAH(ev.UD.AH)
			if err != nil {
				t.connectLeft--
				return fmt.Errorf("failure creating address handle: %w", err)
			}
			n.ah, n.remoteQPN, n.remoteQKey = ah, ev.UD.QPNum, ev.UD.QKey
		}
		n.connected = true
		t.connectLeft--
		t.discLeft++
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError,
		rdmacm.EventUnreachable, rdmacm.EventRejected:
		t.printf("%s: event: %v, error: %d\n", t.name, ev.Type, ev.Status)
		t.connectLeft--
		return &rdmacm.ErrEvent{Event: ev, Want: rdmacm.EventEstablished}
	case rdmacm.EventDisconnected:
		ev.ID.Disconnect()
		t.discLeft--
	}
	return nil
}

func (t *cmaTest) connectHandler(ctx context.Context, ev *rdmacm.Event) error {
	if t.connIndex == t.conns {
		t.printf("%s: failing connection request\n", t.name)
		ev.ID.Reject(nil)
		return nil
	}
	n := &cmaNode{id: ev.ID}
	ev.ID.Context = n
	t.nodes = append(t.nodes, n)
	t.connIndex++
	err := t.initNode(n)
	if err == nil {
		t.applyACKTimeout(n.id)
		err = t.postRecvs(n)
	}
	if err == nil {
		p := &rdmacm.ConnParam{ResponderResources: ev.Conn.ResponderResources,
			InitiatorDepth: ev.Conn.InitiatorDepth, RetryCount: 7, RNRRetryCount: 7}
		err = n.id.Accept(ctx, p)
	}
	if err != nil {
		t.connectLeft--
		t.printf("%s: failing connection request\n", t.name)
		ev.ID.Reject(nil)
		return nil
	}
	if t.ud {
		n.connected = true
		t.connectLeft--
	}
	return nil
}

func (t *cmaTest) loop(ctx context.Context, left *int) error {
	for *left > 0 {
		ev, err := t.ch.Get(ctx)
		if err != nil {
			return err
		}
		if err := t.event(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

func (t *cmaTest) runServer(ctx context.Context, bind string, port uint16, df *devFlags) error {
	t.printf("%s: starting server\n", t.name)
	a := netip.IPv4Unspecified()
	if bind != "" {
		var err error
		if a, err = resolveHost(bind); err != nil {
			return err
		}
	}
	dev, cm, err := openForServer(a, df, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer cm.Close()
	lid, err := cm.CreateID(t.ch, t.ps(), t)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(a, port)); err != nil {
		return fmt.Errorf("bind address failed: %w", err)
	}
	if err := lid.Listen(0); err != nil {
		return fmt.Errorf("failure trying to listen: %w", err)
	}
	if err := t.loop(ctx, &t.connectLeft); err != nil {
		return err
	}
	if t.ud {
		if t.count > 0 {
			t.printf("receiving data transfers\n")
			if err := t.pollCQs(ctx, true); err != nil {
				return err
			}
			t.printf("sending replies\n")
			if err := t.postAllSends(true); err != nil {
				return err
			}
			if err := t.pollCQs(ctx, false); err != nil {
				return err
			}
			t.printf("data transfers complete\n")
		}
		t.destroyNodes()
		return nil
	}
	if t.count > 0 {
		t.printf("initiating data transfers\n")
		if err := t.postAllSends(false); err != nil {
			return err
		}
		t.printf("completing sends\n")
		if err := t.pollCQs(ctx, false); err != nil {
			return err
		}
		t.printf("receiving data transfers\n")
		if err := t.pollCQs(ctx, true); err != nil {
			return err
		}
		t.printf("data transfers complete\n")
	}
	if t.migrate {
		if err := t.migrateChannel(lid); err != nil {
			return err
		}
	}
	t.printf("cmatose: disconnecting\n")
	for _, n := range t.nodes {
		if n.connected {
			n.connected = false
			n.id.Disconnect()
		}
	}
	err = t.loop(ctx, &t.discLeft)
	t.printf("disconnected\n")
	t.destroyNodes()
	return err
}

func (t *cmaTest) runClient(ctx context.Context, bind, dst string, port uint16, df *devFlags) error {
	t.printf("%s: starting client\n", t.name)
	d, err := resolveHost(dst)
	if err != nil {
		return err
	}
	var src netip.Addr
	if bind != "" {
		if src, err = resolveHost(bind); err != nil {
			return err
		}
	}
	dev, cm, src, err := openForClient(src, d, df, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer cm.Close()
	t.printf("%s: connecting\n", t.name)
	for i := 0; i < t.conns; i++ {
		n := &cmaNode{}
		if n.id, err = cm.CreateID(t.ch, t.ps(), n); err != nil {
			return err
		}
		t.nodes = append(t.nodes, n)
		if err := n.id.ResolveAddr(ctx, src, netip.AddrPortFrom(d, port)); err != nil {
			return fmt.Errorf("failure getting addr: %w", err)
		}
	}
	if err := t.loop(ctx, &t.connectLeft); err != nil {
		return err
	}
	if t.ud {
		if t.count > 0 {
			t.printf("initiating data transfers\n")
			if err := t.postAllSends(false); err != nil {
				return err
			}
			t.printf("receiving data transfers\n")
			if err := t.pollCQs(ctx, true); err != nil {
				return err
			}
			t.printf("data transfers complete\n")
		}
		t.destroyNodes()
		return nil
	}
	if t.count > 0 {
		t.printf("receiving data transfers\n")
		if err := t.pollCQs(ctx, true); err != nil {
			return err
		}
		t.printf("sending replies\n")
		if err := t.postAllSends(false); err != nil {
			return err
		}
		t.printf("data transfers complete\n")
	}
	if t.migrate {
		if err := t.migrateChannel(nil); err != nil {
			return err
		}
	}
	err = t.loop(ctx, &t.discLeft)
	t.destroyNodes()
	return err
}

// migrateChannel moves the listener (if any) and every node's ID to a new
// event channel, as cmatose -m does; the test goes on with that channel.
// Events already queued for them move with them.
func (t *cmaTest) migrateChannel(listen *rdmacm.ID) error {
	t.printf("migrating to new event channel\n")
	ch := rdmacm.NewEventChannel()
	var err error
	if listen != nil {
		err = listen.MigrateID(ch)
	}
	for _, n := range t.nodes {
		if err == nil && n.id != nil {
			err = n.id.MigrateID(ch)
		}
	}
	if err != nil {
		t.printf("%s: failure migrating to channel: %v\n", t.name, err)
		return err
	}
	t.ch.Close()
	t.ch = ch
	return nil
}

func (t *cmaTest) destroyNodes() {
	for _, n := range t.nodes {
		if n.id == nil {
			continue
		}
		if n.ah != nil {
			n.ah.Destroy()
		}
		if n.id.QP() != nil {
			n.id.DestroyQP()
		}
		if n.sendCQ != nil {
			n.sendCQ.Destroy()
		}
		if n.recvCQ != nil && n.recvCQ != n.sendCQ {
			n.recvCQ.Destroy()
		}
		if n.mr != nil {
			n.mr.Dereg()
		}
		if n.pd != nil {
			n.pd.Dealloc()
		}
		n.id.Destroy()
		n.id = nil
	}
}
