package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// memNow returns the live heap after a collection and the process's
// resident set, in bytes.
func memNow() (heap, rss uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, rssBytes()
}

// rssBytes reads VmRSS from /proc (0 where there is none).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// runQPScale creates as many RC QPs as asked on one device (on UDP
// loopback), each with 16-deep queues and one shared CQ, and brings each to
// RTS, connected to a QPN on a second device; it prints the time and the
// memory per QP as key=value fields.
func runQPScale(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("qpscale", flag.ContinueOnError)
	n := fs.Int("n", verbs.MaxQP, "QPs to create")
	if err := fs.Parse(args); err != nil {
		return err
	}
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	da, err := roce.Open([]netip.Addr{a}, &roce.Options{Port: 0})
	if err != nil {
		return err
	}
	defer da.Close()
	pd, err := da.AllocPD()
	if err != nil {
		return err
	}
	cq, err := da.CreateCQ(verbs.MaxCQE, nil)
	if err != nil {
		return err
	}
	heap0, rss0 := memNow()
	qps := make([]*verbs.QP, 0, *n)
	start := time.Now()
	var createErr error
	for range *n {
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			createErr = err
			break
		}
		qps = append(qps, qp)
	}
	created := time.Since(start)
	peer := wire.GIDFromAddr(b)
	for i, qp := range qps {
		if err := bringUp(qp, peer, wire.QPN(0x100000+i)); err != nil {
			return fmt.Errorf("QP %d to RTS: %w", i, err)
		}
	}
	total := time.Since(start)
	heap1, rss1 := memNow()
	k := uint64(max(len(qps), 1))
	fmt.Fprintf(out, "qps=%d create_s=%.3f rts_s=%.3f heap_per_qp=%d rss_per_qp=%d",
		len(qps), created.Seconds(), total.Seconds(), (heap1-heap0)/k, (rss1-rss0)/k)
	if createErr != nil {
		fmt.Fprintf(out, " stopped=%q", createErr.Error())
	}
	fmt.Fprintln(out)
	runtime.KeepAlive(qps)
	return nil
}

// bringUp moves qp from RESET to RTS, connected to dqpn at gid.
func bringUp(qp *verbs.QP, gid wire.GID, dqpn wire.QPN) error {
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if err := qp.Modify(&verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: verbs.MTU4096, DestQPN: dqpn,
		AH: verbs.AHAttr{DGID: gid, PortNum: 1}, MaxDestRdAtomic: 1, MinRNRTimer: 12},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
		return err
	}
	return qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
}

// cmFlags are the flags of the rdma_cm scale test's two sides.
type cmFlags struct {
	n        int
	workers  int
	addr     string
	port     int
	rocePort int
	linger   time.Duration
}

func (f *cmFlags) parse(name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.IntVar(&f.n, "n", 10000, "connections")
	fs.IntVar(&f.workers, "workers", 16, "connections set up at once (client)")
	fs.StringVar(&f.addr, "addr", "127.0.0.2", "the server's address")
	fs.IntVar(&f.port, "port", 7471, "the rdma_cm port")
	fs.IntVar(&f.rocePort, "roce-port", 14791, "the UDP port both sides bind and send RoCEv2 to")
	fs.DurationVar(&f.linger, "linger", 10*time.Second, "how long the client stays after closing the connections (its CM resends lost DREQs)")
	return fs.Parse(args)
}

// cmSide is one side of the rdma_cm case: a device, its rdma_cm, a PD
// with one MR, and one CQ for every connection.
type cmSide struct {
	dev *verbs.Device
	cm  *rdmacm.CM
	pd  *verbs.PD
	mr  *verbs.MR
	cq  *verbs.CQ
}

// openCMSide opens a device on addr and UDP port port (not 4791, which
// Linux rxe may hold), its rdma_cm, and the resources for n connections
// with an MR of size bytes and access acc.
func openCMSide(addr netip.Addr, port, n, size int, acc verbs.Access) (*cmSide, error) {
	dev, err := roce.Open([]netip.Addr{addr}, &roce.Options{Port: uint16(port)})
	if err != nil {
		return nil, err
	}
	s := &cmSide{dev: dev}
	if s.cm, err = rdmacm.New([]*verbs.Device{dev}, nil); err != nil {
		dev.Close()
		return nil, err
	}
	if s.pd, err = dev.AllocPD(); err == nil {
		if s.mr, err = s.pd.RegMR(make([]byte, size), acc); err == nil {
			s.cq, err = dev.CreateCQ(min(2*n+64, verbs.MaxCQE), nil)
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *cmSide) close() {
	s.cm.Close()
	s.dev.Close()
}

// waitSuccess waits for n successful completions on the side's CQ; what
// names them in errors.
func (s *cmSide) waitSuccess(ctx context.Context, n int, what string) error {
	wcs := make([]verbs.WC, 256)
	for got := 0; got < n; {
		k, err := s.cq.Wait(ctx, wcs)
		if err != nil {
			return fmt.Errorf("%d of %d %ss: %w", got, n, what, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.Success {
				return fmt.Errorf("%s %d: %v", what, wc.WRID, wc.Status)
			}
		}
		got += k
	}
	return nil
}

// runCMServer accepts n connections; each receives one SEND of 64 bytes.
// It prints the memory per connection once all are up and have moved
// their data, then waits for the client to disconnect them all.
func runCMServer(args []string, out io.Writer) error {
	var f cmFlags
	if err := f.parse("cm-server", args); err != nil {
		return err
	}
	addr := netip.MustParseAddr(f.addr)
	side, err := openCMSide(addr, f.rocePort, f.n, 64*f.n, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer side.close()
	mr := side.mr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts := &rdmacm.ConnOptions{CM: side.cm, PD: side.pd, SendCQ: side.cq, Backlog: 1024, AcceptControl: true,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	l, err := rdmacm.Listen(ctx, netip.AddrPortFrom(addr, uint16(f.port)), opts)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintln(out, "listening")
	heap0, rss0 := memNow()
	// Requests are taken in turn; each is accepted by a goroutine of its
	// own (Accept waits for the client's RTU), 64 at a time.
	conns := make([]*rdmacm.Conn, f.n)
	sem := make(chan struct{}, 64)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for i := range f.n {
		req, err := l.Request(ctx)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		c, err := req.Prepare(nil)
		if err != nil {
			return err
		}
		if err := c.QP.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(64*i, 64)}}}); err != nil {
			return err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := req.Accept(ctx, nil)
			if err != nil {
				select {
				case errc <- fmt.Errorf("accept %d: %w", i, err):
				default:
				}
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	if err := side.waitSuccess(ctx, f.n, "receive"); err != nil {
		return err
	}
	heap1, rss1 := memNow()
	fmt.Fprintf(out, "server conns=%d heap_per_conn=%d rss_per_conn=%d\n", len(conns),
		(heap1-heap0)/uint64(f.n), (rss1-rss0)/uint64(f.n))
	// The client disconnects them all; DREQs lost on the way are sent
	// again by its CM for a while, not forever (IB has no keepalive), so
	// the wait is bounded and reported.
	fmt.Fprintln(out, "server data_done=1")
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	disc := 0
wait:
	for _, c := range conns {
		select {
		case <-c.Disconnected():
			disc++
		case <-wait.C:
			break wait
		}
	}
	st := side.dev.Stats()
	fmt.Fprintf(out, "server disconnected=%d ud_no_recv=%d\n", disc, st.RxBadState.Load())
	for _, c := range conns {
		c.Close()
	}
	// Give the CM time to finish the DREQ/DREP exchanges (resending lost
	// DREQs) before the process ends.
	time.Sleep(f.linger)
	return nil
}

// runCMClient makes n connections to the server, workers at a time, and
// sends one 64-byte SEND on each; it prints the connect rate and the memory
// per connection, then closes them all.
func runCMClient(args []string, out io.Writer) error {
	var f cmFlags
	if err := f.parse("cm-client", args); err != nil {
		return err
	}
	src := netip.MustParseAddr("127.0.0.1")
	side, err := openCMSide(src, f.rocePort, f.n, 64, 0)
	if err != nil {
		return err
	}
	defer side.close()
	mr := side.mr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts := &rdmacm.ConnOptions{CM: side.cm, PD: side.pd, SendCQ: side.cq, Source: src,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	dst := netip.AddrPortFrom(netip.MustParseAddr(f.addr), uint16(f.port))
	heap0, rss0 := memNow()
	conns := make([]*rdmacm.Conn, f.n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for range f.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= f.n {
					return
				}
				var c *rdmacm.Conn
				var err error
				for try := 0; ; try++ {
					c, err = rdmacm.Dial(ctx, dst, opts)
					if err == nil || try == 50 || !errors.Is(err, rdmacm.ErrRejected) {
						break
					}
					time.Sleep(20 * time.Millisecond) // the server is not listening yet
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	connected := time.Since(start)
	for i, c := range conns {
		if err := c.QP.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 64)}}}); err != nil {
			return err
		}
	}
	if err := side.waitSuccess(ctx, f.n, "SEND"); err != nil {
		return err
	}
	moved := time.Since(start)
	heap1, rss1 := memNow()
	fmt.Fprintf(out, "client conns=%d connect_s=%.3f conn_per_s=%.0f data_s=%.3f heap_per_conn=%d rss_per_conn=%d\n",
		f.n, connected.Seconds(), float64(f.n)/connected.Seconds(), moved.Seconds(),
		(heap1-heap0)/uint64(f.n), (rss1-rss0)/uint64(f.n))
	for _, c := range conns {
		c.Close()
	}
	// Give the CM time to finish the DREQ/DREP exchanges (resending lost
	// DREQs) before the process ends.
	time.Sleep(f.linger)
	return nil
}
