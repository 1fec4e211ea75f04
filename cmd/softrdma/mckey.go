// softrdma mckey: librdmacm's multicast test. Every node (-c of them)
// resolves the group address, creates a UD QP, joins the group with
// rdma_join_multicast and, after a pause for the fabric, sends -C messages
// of -S bytes to it (-s) or receives as many; same flags and output lines as
// the C tool. On an InfiniBand port (--hca) the join is an SA
// MCMemberRecord join and the pause lets the SM program the switches.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// psUDP and psIPoIB are the rdma_cm port spaces mckey's -p names.
const (
	psIPoIB = 0x0002
	psUDP   = 0x0111
)

type mckeyTest struct {
	sender      bool
	size, count int
	out         io.Writer
	ch          *rdmacm.EventChannel
	group       netip.Addr
	nodes       []*mcNode
	connectLeft int
}

type mcNode struct {
	id         *rdmacm.ID
	connected  bool
	pd         *verbs.PD
	cq         *verbs.CQ
	mr         *verbs.MR
	ah         *verbs.AH
	remoteQPN  wire.QPN
	remoteQKey wire.QKey
}

func runMckey(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("mckey", flag.ContinueOnError)
	maddr := fs.String("m", "", "multicast `address` to join (IPv4 or IPv6)")
	unmapped := fs.String("M", "", "unmapped multicast `address` (AF_IB: not supported on RoCE)")
	sender := fs.Bool("s", false, "send to the group (default: receive)")
	bind := fs.String("b", "", "bind `address`: the local address the group is joined from")
	conns := fs.Int("c", 1, "connections: QPs joined to the group, each sending or receiving")
	count := fs.Int("C", 10, "message count")
	size := fs.Int("S", 100, "message size")
	ps := fs.String("p", "0x111", "port space: 0x111 for UDP (the only one on RoCE; 0x2 for IPoIB is refused)")
	delay := fs.Duration("delay", 3*time.Second, "pause between the join and the transfers, as mckey's for the SM (softrdma extension)")
	timeout := fs.Duration("timeout", 0, "give up when the messages have not all come after this long (softrdma extension; 0: wait forever, as mckey)")
	df := addDevFlags(fs, true)
	fs.Usage = usageFunc(fs, "mckey -m GROUP [flags]        (receiver)\nmckey -m GROUP -s [flags]     (sender)",
		"mckey: join a multicast group with rdma_cm (rdma_join_multicast) and send or receive UD datagrams\n"+
			"to it, with librdmacm mckey's flags and output.")
	pos, err := parseFlags(fs, splitShortFlags(args, "s"), out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	if *unmapped != "" {
		if *bind == "" {
			fmt.Fprintln(out, "unmapped multicast address requires binding to source address")
			return fmt.Errorf("%w: -M needs -b", tool.ErrUsage)
		}
		return fmt.Errorf("-M %s: AF_IB addresses are not supported on RoCE", *unmapped)
	}
	if *maddr == "" {
		fs.Usage()
		return fmt.Errorf("%w: -m is required", tool.ErrUsage)
	}
	space, err := strconv.ParseInt(*ps, 0, 32)
	if err != nil || (space != psUDP && space != psIPoIB) {
		return fmt.Errorf("%w: port space %q", tool.ErrUsage, *ps)
	}
	if space == psIPoIB {
		return errors.New("the IPoIB port space needs InfiniBand (RDMA_PS_IPOIB)")
	}
	if *conns < 1 || *count < 0 || *size < 0 {
		return fmt.Errorf("%w: invalid connections, count or size", tool.ErrUsage)
	}
	t := &mckeyTest{sender: *sender, size: *size, count: *count, out: out, ch: rdmacm.NewEventChannel(), connectLeft: *conns}
	if t.size == 0 {
		t.count = 0
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	ret := t.run(ctx, *maddr, *bind, *conns, *delay, df)
	fmt.Fprintln(out, "test complete")
	t.destroyNodes()
	status := 0
	if ret != nil {
		status = -1
		fmt.Fprintf(out, "mckey: %v\n", ret)
	}
	fmt.Fprintf(out, "return status %d\n", status)
	if ret != nil {
		return errors.New("test failed")
	}
	return nil
}

func (t *mckeyTest) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }

func (t *mckeyTest) run(ctx context.Context, maddr, bind string, conns int, delay time.Duration, df *devFlags) error {
	role := "server"
	if t.sender {
		role = "client"
	}
	t.printf("mckey: starting %s\n", role)
	var src netip.Addr
	var err error
	if bind != "" {
		if src, err = resolveHost(bind); err != nil {
			return err
		}
	}
	if t.group, err = resolveHost(maddr); err != nil {
		return err
	}
	if !t.group.IsMulticast() {
		return fmt.Errorf("%v is not a multicast address", t.group)
	}
	dev, cm, src, err := openForClient(src, t.group, df, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer cm.Close()
	t.printf("mckey: joining\n")
	for range conns {
		n := &mcNode{}
		if n.id, err = cm.CreateID(t.ch, rdmacm.PortSpaceUDP, n); err != nil {
			return err
		}
		t.nodes = append(t.nodes, n)
		if bind != "" {
			if err := n.id.BindAddr(netip.AddrPortFrom(src, 0)); err != nil {
				return fmt.Errorf("addr bind failure: %w", err)
			}
		}
		if err := n.id.ResolveAddr(ctx, src, netip.AddrPortFrom(t.group, 0)); err != nil {
			return fmt.Errorf("resolve addr failure: %w", err)
		}
	}
	for t.connectLeft > 0 {
		ev, err := nextEvent(ctx, t.ch)
		if err != nil {
			return err
		}
		if err := t.event(ctx, ev); err != nil {
			return err
		}
	}
	// mckey's pause for the subnet manager to program the switches; on
	// Ethernet it gives IGMP snooping switches time too.
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	if t.count > 0 {
		if t.sender {
			t.printf("initiating data transfers\n")
			for _, n := range t.nodes {
				if err := t.postSends(ctx, n); err != nil {
					return err
				}
			}
		} else {
			t.printf("receiving data transfers\n")
			if err := t.pollCQs(ctx); err != nil {
				return err
			}
		}
		t.printf("data transfers complete\n")
	}
	var first error
	for _, n := range t.nodes {
		if err := n.id.LeaveMulticast(t.group); err != nil && first == nil {
			first = fmt.Errorf("failure leaving: %w", err)
		}
	}
	return first
}

// event handles a connection-phase event as mckey's cma_handler.
func (t *mckeyTest) event(ctx context.Context, ev *rdmacm.Event) error {
	n, _ := ev.ID.Context.(*mcNode)
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		if err := t.addrHandler(ctx, n); err != nil {
			t.connectLeft--
			return err
		}
	case rdmacm.EventMulticastJoin:
		return t.joinHandler(n, ev)
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventMulticastError:
		t.printf("mckey: event: %v, error: %d\n", ev.Type, ev.Status)
		t.connectLeft--
		return fmt.Errorf("event %v, status %d", ev.Type, ev.Status)
	}
	return nil
}

func (t *mckeyTest) addrHandler(ctx context.Context, n *mcNode) error {
	dev := n.id.Device()
	if t.count > 0 {
		pa, err := dev.QueryPort(1)
		if err != nil {
			return err
		}
		if t.size > pa.ActiveMTU.Bytes() {
			t.printf("mckey: message_size %d is larger than active mtu %d\n", t.size, pa.ActiveMTU.Bytes())
			return fmt.Errorf("message size %d is larger than the active MTU %d", t.size, pa.ActiveMTU.Bytes())
		}
	}
	var err error
	if n.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("unable to allocate PD: %w", err)
	}
	cqe := 2
	if t.count > 0 {
		cqe = 2 * t.count
	}
	if n.cq, err = dev.CreateCQ(cqe, nil); err != nil {
		return fmt.Errorf("unable to create CQ: %w", err)
	}
	wrs := max(t.count, 1)
	if _, err := n.id.CreateQP(n.pd, verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: wrs, MaxRecvWR: wrs, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("unable to create QP: %w", err)
	}
	if t.count > 0 {
		if n.mr, err = n.pd.RegMR(make([]byte, t.size+grhSize(true)), verbs.AccessLocalWrite); err != nil {
			return fmt.Errorf("failed to reg MR: %w", err)
		}
	}
	if !t.sender && t.count > 0 {
		qp := n.id.QP()
		for range t.count {
			if err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{n.mr.SGE(0, t.size+grhSize(true))}}}); err != nil {
				return fmt.Errorf("failed to post receives: %w", err)
			}
		}
	}
	if err := n.id.JoinMulticast(ctx, t.group, n); err != nil {
		return fmt.Errorf("failure joining: %w", err)
	}
	return nil
}

func (t *mckeyTest) joinHandler(n *mcNode, ev *rdmacm.Event) error {
	ah := ev.UD.AH
	t.printf("mckey: joined dgid: %s mlid 0x%x sl %d\n", gidString(ah.DGID), ah.DLID, ah.SL)
	n.remoteQPN, n.remoteQKey = ev.UD.QPNum, ev.UD.QKey
	var err error
	if n.ah, err = n.pd.CreateAH(ah); err != nil {
		t.printf("mckey: failure creating address handle\n")
		t.connectLeft--
		return err
	}
	n.connected = true
	t.connectLeft--
	return nil
}

// gidString formats a GID as inet_ntop(AF_INET6) does: IPv4-mapped GIDs as
// ::ffff:a.b.c.d.
func gidString(g wire.GID) string {
	return netip.AddrFrom16(g).String()
}

// postSends posts the node's messages, SEND with immediate (its QPN) to
// the group, as mckey. mckey posts them unsignaled and leaves at once;
// here the last one is signaled and waited for, so that the QP is not
// destroyed before the datagrams have left.
func (t *mckeyTest) postSends(ctx context.Context, n *mcNode) error {
	if !n.connected || t.count == 0 {
		return nil
	}
	qp := n.id.QP()
	for i := range t.count {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSendWithImm, Imm: uint32(qp.QPN()),
			SGL: []verbs.SGE{n.mr.SGE(0, t.size)}, AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey}
		if i == t.count-1 {
			wr.Flags = verbs.SendSignaled
		}
		if err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.printf("failed to post sends: %v\n", err)
			return err
		}
	}
	wc, err := waitWC(ctx, n.cq, nil)
	if err != nil {
		return err
	}
	return wc.Err()
}

// pollCQs waits for count completions on every joined node, as mckey's
// poll_cqs (whatever their status).
func (t *mckeyTest) pollCQs(ctx context.Context) error {
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for range t.count {
			if _, err := waitWC(ctx, n.cq, nil); err != nil {
				return fmt.Errorf("failed polling CQ: %w", err)
			}
		}
	}
	return nil
}

func (t *mckeyTest) destroyNodes() {
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
		if n.cq != nil {
			n.cq.Destroy()
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
