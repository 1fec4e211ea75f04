// softrdma ping: rping's exchange over an rdma_cm-connected RC QP, either
// role, wire-compatible with librdmacm's rping.
//
// Each round: the client SENDs the address, rkey and length of a source
// buffer holding "rdma-ping-N: ABC..."; the server RDMA READs it and SENDs a
// go-ahead; the client SENDs a sink buffer's address, rkey and length; the
// server RDMA WRITEs the text back into it and SENDs another go-ahead. The
// advertisement is 16 bytes: big-endian 64-bit address, 32-bit rkey,
// 32-bit length.

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

const (
	rpingMinSize = 26 // sizeof("2147483647") + sizeof("rdma-ping-%d: ")
	rpingMaxSize = 64*1024 - 1
	rpingInfoLen = 16
)

type pingOpts struct {
	server, verbose, validate, debug bool
	persistent                       bool // -P
	selfQP                           bool // -q
	count, size                      int
	out                              io.Writer
}

func (o *pingOpts) debugf(format string, args ...any) {
	if o.debug {
		fmt.Fprintf(o.out, format, args...)
	}
}

func runPing(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ping", flag.ContinueOnError)
	server := fs.Bool("s", false, "server side")
	client := fs.Bool("c", false, "client side")
	addr := fs.String("a", "", "address (server: to bind to, default any; client: of the server)")
	src := fs.String("I", "", "source address to bind to (client)")
	port := fs.Uint("p", 7174, "port")
	count := fs.Int("C", 0, "ping count (0: forever)")
	size := fs.Int("S", 64, fmt.Sprintf("ping data size (%d..%d)", rpingMinSize, rpingMaxSize))
	verbose := fs.Bool("v", false, "display ping data")
	validate := fs.Bool("V", false, "validate ping data")
	debug := fs.Bool("d", false, "debug output")
	persistent := fs.Bool("P", false, "persistent server: keep accepting connections, serving them at once, until interrupted")
	selfQP := fs.Bool("q", false, "create the QP with verbs and move it through its states with rdma_init_qp_attr's attributes, not rdma_create_qp")
	df := addDevFlags(fs, false)
	fs.Usage = usageFunc(fs, "ping -s [-a ADDR] [flags]   (server)\nping -c -a SERVER [flags]   (client)",
		"rping: an RDMA READ/WRITE ping-pong over an rdma_cm connection, with rping's flags and output.")
	pos, err := parseFlags(fs, splitShortFlags(args, "scvVdPq"), out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	if *server == *client {
		return errors.New("give exactly one of -s (server) and -c (client)")
	}
	if *persistent && !*server {
		return errors.New("-P is a server option (with -s)")
	}
	if *size < rpingMinSize || *size > rpingMaxSize {
		return fmt.Errorf("invalid size %d (valid range is %d to %d)", *size, rpingMinSize, rpingMaxSize)
	}
	if *count < 0 {
		return fmt.Errorf("invalid count %d", *count)
	}
	if *port > 0xFFFF {
		return fmt.Errorf("invalid port %d", *port)
	}
	o := &pingOpts{server: *server, verbose: *verbose, validate: *validate, debug: *debug,
		count: *count, size: *size, out: out, persistent: *persistent, selfQP: *selfQP}
	if *server {
		bind := netip.IPv4Unspecified()
		if *addr != "" {
			a, err := resolveHost(*addr)
			if err != nil {
				return err
			}
			bind = a
		}
		return pingServer(ctx, o, netip.AddrPortFrom(bind, uint16(*port)), df)
	}
	if *addr == "" {
		return errors.New("the client needs -a (the server's address)")
	}
	dst, err := resolveHost(*addr)
	if err != nil {
		return err
	}
	var s netip.Addr
	if *src != "" {
		if s, err = resolveHost(*src); err != nil {
			return err
		}
	}
	return pingClient(ctx, o, s, netip.AddrPortFrom(dst, uint16(*port)), df)
}

// pingConn is one side's QP, CQ and buffers.
type pingConn struct {
	o       *pingOpts
	id      *rdmacm.ID
	pd      *verbs.PD
	cq      *verbs.CQ
	qp      *verbs.QP
	recv    []byte
	send    []byte
	rdma    []byte
	start   []byte
	recvMR  *verbs.MR
	sendMR  *verbs.MR
	rdmaMR  *verbs.MR
	startMR *verbs.MR
	gone    chan struct{}
}

func newPingConn(o *pingOpts, id *rdmacm.ID) (*pingConn, error) {
	c := &pingConn{o: o, id: id, gone: make(chan struct{})}
	dev := id.Device()
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if c.cq, err = dev.CreateCQ(32, nil); err != nil {
		return nil, err
	}
	init := verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if o.selfQP {
		// rping -q: the application's own QP, in INIT with no remote
		// access until the CM's attributes move it on (selfModify).
		init.Type = verbs.RC
		if c.qp, err = c.pd.CreateQP(init); err != nil {
			return nil, err
		}
		if err := c.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, PKeyIndex: 0, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			return c, err
		}
	} else if c.qp, err = id.CreateQP(c.pd, init); err != nil {
		return nil, err
	}
	o.debugf("created pd, cq and qp %#x\n", c.qp.QPN())
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	c.recv, c.send, c.rdma = make([]byte, rpingInfoLen), make([]byte, rpingInfoLen), make([]byte, o.size)
	if c.recvMR, err = c.pd.RegMR(c.recv, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.sendMR, err = c.pd.RegMR(c.send, 0); err != nil {
		return nil, err
	}
	if c.rdmaMR, err = c.pd.RegMR(c.rdma, remote); err != nil {
		return nil, err
	}
	if !o.server {
		c.start = make([]byte, o.size)
		if c.startMR, err = c.pd.RegMR(c.start, remote); err != nil {
			return nil, err
		}
	}
	o.debugf("allocated & registered buffers...\n")
	return c, c.postRecv()
}

// selfModify moves a -q QP to INIT, RTR and RTS with the attributes the
// CM gives for the ID's connection (rping_self_modify_qp).
func (c *pingConn) selfModify(id *rdmacm.ID) error {
	for _, st := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		a, mask, err := id.InitQPAttr(st)
		if err == nil {
			err = c.qp.Modify(&a, mask)
		}
		if err != nil {
			return fmt.Errorf("rping_modify_qp: %v: %w", st, err)
		}
	}
	c.o.debugf("qp %#x moved to RTS\n", c.qp.QPN())
	return nil
}

// disconnect ends the connection (rping_disconnect): a -q QP goes to the
// error state first, as nothing else moves it.
func (c *pingConn) disconnect(id *rdmacm.ID) {
	if c.o.selfQP {
		c.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	}
	id.Disconnect()
}

func (c *pingConn) postRecv() error {
	return c.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{c.recvMR.SGE(0, rpingInfoLen)}}})
}

func (c *pingConn) free() {
	for _, mr := range []*verbs.MR{c.recvMR, c.sendMR, c.rdmaMR, c.startMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if c.qp != nil {
		if c.o.selfQP {
			c.qp.Destroy()
		} else {
			c.id.DestroyQP()
		}
	}
	if c.cq != nil {
		c.cq.Destroy()
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
}

// watch reads the ID's events after the connection is up and closes gone
// on DISCONNECTED.
func (c *pingConn) watch(ctx context.Context, ch cmEvents, done chan<- struct{}) {
	defer close(done)
	closed := false
	for {
		ev, err := ch.Get(ctx)
		if err != nil {
			if !closed {
				close(c.gone)
			}
			return
		}
		c.o.debugf("cma_event type %v\n", ev.Type)
		switch ev.Type {
		case rdmacm.EventDisconnected:
			role := "client"
			if c.o.server {
				role = "server"
			}
			fmt.Fprintf(os.Stderr, "%s DISCONNECT EVENT...\n", role)
			if !closed {
				closed = true
				close(c.gone)
			}
		case rdmacm.EventTimewaitExit:
		default:
			fmt.Fprintf(os.Stderr, "cma event %v, error %d\n", ev.Type, ev.Status)
		}
	}
}

// waitOp waits for a completion of opcode op; successful send completions
// of other kinds are skipped.
func (c *pingConn) waitOp(ctx context.Context, op verbs.WCOpcode) error {
	for {
		wc, err := waitWC(ctx, c.cq, c.gone)
		if err != nil {
			return err
		}
		if wc.Status != verbs.Success {
			if wc.Status == verbs.WRFlushErr {
				return errDisconnected
			}
			return fmt.Errorf("cq completion failed status %d (%v)", int(wc.Status), wc.Status)
		}
		if wc.Opcode == op {
			if op == verbs.WCRecv && wc.ByteLen != rpingInfoLen {
				return fmt.Errorf("received bogus data, size %d", wc.ByteLen)
			}
			return nil
		}
	}
}

func (c *pingConn) sendInfo(buf []byte, mr *verbs.MR) error {
	binary.BigEndian.PutUint64(c.send[0:], mr.SGE(0, 0).Addr)
	binary.BigEndian.PutUint32(c.send[8:], uint32(mr.RKey()))
	binary.BigEndian.PutUint32(c.send[12:], uint32(len(buf)))
	c.o.debugf("RDMA addr %x rkey %x len %d\n", mr.SGE(0, 0).Addr, mr.RKey(), len(buf))
	return c.postSendBuf()
}

func (c *pingConn) postSendBuf() error {
	return c.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.sendMR.SGE(0, rpingInfoLen)}}})
}

func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func pingClient(ctx context.Context, o *pingOpts, src netip.Addr, dst netip.AddrPort, df *devFlags) error {
	dev, cm, src, err := openForClient(src, dst.Addr(), df, o.debug)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer cm.Close()
	ch := rdmacm.NewEventChannel()
	id, err := cm.CreateID(ch, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		return err
	}
	defer id.Destroy()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := id.ResolveAddr(rctx, src, dst); err != nil {
		return err
	}
	if _, err := expect(rctx, ch, rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := id.ResolveRoute(rctx); err != nil {
		return err
	}
	if _, err := expect(rctx, ch, rdmacm.EventRouteResolved); err != nil {
		return err
	}
	o.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	c, err := newPingConn(o, id)
	if c != nil {
		defer c.free()
	}
	if err != nil {
		return err
	}
	cp := &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	connected := rdmacm.EventEstablished
	if o.selfQP {
		cp.QPNum, connected = c.qp.QPN(), rdmacm.EventConnectResponse
	}
	if err := id.Connect(ctx, cp); err != nil {
		return err
	}
	if _, err := expect(ctx, ch, connected); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	if o.selfQP {
		if err := c.selfModify(id); err != nil {
			return err
		}
		if err := id.Establish(); err != nil {
			return fmt.Errorf("rdma_establish: %w", err)
		}
	}
	o.debugf("rdma_connect successful\n")
	done := make(chan struct{})
	wctx, stopWatch := context.WithCancel(context.Background())
	go c.watch(wctx, ch, done)
	defer func() { stopWatch(); <-done }()

	runErr := c.clientLoop(ctx)
	c.disconnect(id)
	select {
	case <-c.gone:
	case <-time.After(3 * time.Second):
	}
	if errors.Is(runErr, errDisconnected) {
		runErr = nil
	}
	return runErr
}

func (c *pingConn) clientLoop(ctx context.Context) error {
	o := c.o
	start := byte(65)
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		n := copy(c.start, fmt.Sprintf("rdma-ping-%d: ", ping))
		ch := start
		for i := n; i < o.size; i++ {
			c.start[i] = ch
			ch++
			if ch > 122 {
				ch = 65
			}
		}
		start++
		if start > 122 {
			start = 65
		}
		c.start[o.size-1] = 0
		if err := c.sendInfo(c.start, c.startMR); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if err := c.waitOp(ctx, verbs.WCRecv); err != nil {
			return err
		}
		if err := c.postRecv(); err != nil {
			return err
		}
		if err := c.sendInfo(c.rdma, c.rdmaMR); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if err := c.waitOp(ctx, verbs.WCRecv); err != nil {
			return err
		}
		if err := c.postRecv(); err != nil {
			return err
		}
		if o.validate && !bytes.Equal(c.start, c.rdma) {
			return errors.New("data mismatch")
		}
		if o.verbose {
			fmt.Fprintf(o.out, "ping data: %s\n", cString(c.rdma))
		}
		clear(c.rdma)
	}
	return nil
}

func pingServer(ctx context.Context, o *pingOpts, bind netip.AddrPort, df *devFlags) error {
	dev, cm, err := openForServer(bind.Addr(), df, o.debug)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer cm.Close()
	ch := rdmacm.NewEventChannel()
	lid, err := cm.CreateID(ch, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	if err := lid.BindAddr(bind); err != nil {
		return fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if err := lid.Listen(3); err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	o.debugf("rdma_listen on %v\n", bind)
	if o.persistent {
		return pingPersistent(ctx, o, ch)
	}
	ev, err := expect(ctx, ch, rdmacm.EventConnectRequest)
	if err != nil {
		return err
	}
	return pingServe(ctx, o, ev, ch)
}

// pingServe serves the connection ev requests, taking its events from ch.
func pingServe(ctx context.Context, o *pingOpts, ev *rdmacm.Event, ch cmEvents) error {
	child := ev.ID
	defer child.Destroy()
	o.debugf("child cma from %v\n", child.PeerAddr())
	c, err := newPingConn(o, child)
	if c != nil {
		defer c.free()
	}
	if err != nil {
		child.Reject(nil)
		return err
	}
	cp := &rdmacm.ConnParam{ResponderResources: ev.Conn.ResponderResources,
		InitiatorDepth: ev.Conn.InitiatorDepth, RNRRetryCount: 7}
	if o.selfQP {
		if err := c.selfModify(child); err != nil {
			child.Reject(nil)
			return err
		}
		cp.QPNum = c.qp.QPN()
	}
	if err := child.Accept(ctx, cp); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if _, err := expect(ctx, ch, rdmacm.EventEstablished); err != nil {
		return fmt.Errorf("wait for CONNECTED: %w", err)
	}
	o.debugf("ESTABLISHED\n")
	done := make(chan struct{})
	wctx, stopWatch := context.WithCancel(context.Background())
	go c.watch(wctx, ch, done)
	defer func() { stopWatch(); <-done }()
	runErr := c.serverLoop(ctx)
	c.disconnect(child)
	if errors.Is(runErr, errDisconnected) {
		return nil
	}
	if runErr != nil {
		return fmt.Errorf("rping server failed: %w", runErr)
	}
	return nil
}

func (c *pingConn) serverLoop(ctx context.Context) error {
	o := c.o
	for {
		if err := c.waitOp(ctx, verbs.WCRecv); err != nil {
			return err
		}
		raddr, rkey, rlen := binary.BigEndian.Uint64(c.recv), wire.RKey(binary.BigEndian.Uint32(c.recv[8:])), binary.BigEndian.Uint32(c.recv[12:])
		o.debugf("Received rkey %x addr %x len %d from peer\n", rkey, raddr, rlen)
		if err := c.postRecv(); err != nil {
			return err
		}
		if err := c.qp.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{c.rdmaMR.SGE(0, int(rlen))}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if err := c.waitOp(ctx, verbs.WCRDMARead); err != nil {
			return err
		}
		if o.verbose {
			fmt.Fprintf(o.out, "server ping data: %s\n", cString(c.rdma))
		}
		if err := c.postSendBuf(); err != nil {
			return err
		}
		if err := c.waitOp(ctx, verbs.WCRecv); err != nil {
			return err
		}
		raddr, rkey = binary.BigEndian.Uint64(c.recv), wire.RKey(binary.BigEndian.Uint32(c.recv[8:]))
		if err := c.postRecv(); err != nil {
			return err
		}
		n := len(cString(c.rdma)) + 1
		if err := c.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{c.rdmaMR.SGE(0, min(n, len(c.rdma)))}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if err := c.waitOp(ctx, verbs.WCRDMAWrite); err != nil {
			return err
		}
		o.debugf("server rdma write complete\n")
		if err := c.postSendBuf(); err != nil {
			return err
		}
	}
}
