// The demo: two softrdma devices on two loopback addresses talk RoCEv2 over
// real UDP sockets. It connects RC queue pairs by handing each side the
// other's QPN, PSN and GID in-process (what rdma_cm or a TCP exchange does
// between machines), then shows each operation and measures the link.

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/pcap"
	"github.com/softrdma/softrdma/link/udp"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

type demoSide struct {
	name string
	dev  *verbs.Device
	port uint16
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
}

func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addrA := fs.String("a", "127.0.0.1", "address of device A")
	addrB := fs.String("b", "127.0.0.2", "address of device B")
	port := fs.Uint("port", 4791, "UDP port of both devices (RoCEv2 uses 4791)")
	mtu := fs.Int("mtu", 4096, "path MTU: 256, 512, 1024, 2048 or 4096")
	bwTime := fs.Duration("bw-time", time.Second, "how long the bandwidth test runs")
	latIters := fs.Int("lat-iters", 2000, "round trips in the latency test")
	pcapFile := fs.String("pcap", "", "write every RoCEv2 packet of the demo to `file` (pcap, raw IP; device A's view, which is all of them)")
	bind := fs.String("bind", "", "the two devices' `addresses`, A,B (the same as -a A -b B)")
	fs.Usage = usageFunc(fs, "demo [flags]", "Runs two devices on loopback over real UDP: SEND, WRITE, READ, atomics, bandwidth and latency.\n"+
		"There are two devices, so the other tools' -d does not apply; -a/-b or --bind place them.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	if *bind != "" {
		as, err := tool.ParseAddrs(*bind)
		if err != nil {
			return err
		}
		if len(as) != 2 {
			return fmt.Errorf("%w: --bind needs two addresses, A,B", tool.ErrUsage)
		}
		*addrA, *addrB = as[0].String(), as[1].String()
	}
	pmtu := verbs.MTUFromBytes(*mtu)
	if pmtu.Bytes() != *mtu {
		return fmt.Errorf("MTU %d is not one of 256, 512, 1024, 2048, 4096", *mtu)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ips [2]netip.Addr
	for i, s := range []string{*addrA, *addrB} {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("address %q: %v", s, err)
		}
		ips[i] = ip
	}
	bSet := false
	fs.Visit(func(f *flag.Flag) { bSet = bSet || f.Name == "b" || f.Name == "bind" })
	open := func(ip netip.Addr, port, remote uint16, i int) (*verbs.Device, error) {
		vo := verbs.Options{Name: fmt.Sprintf("softrdma%d", i), MTU: verbs.MTU4096, RemotePort: remote, Logger: logger}
		var dev *verbs.Device
		var err error
		if i == 0 && *pcapFile != "" {
			dev, err = openTapped(ip, port, *pcapFile, vo)
		} else {
			dev, err = roce.Open([]netip.Addr{ip}, &roce.Options{Port: port, Options: vo})
		}
		if err != nil {
			return nil, fmt.Errorf("opening a device on %s: %w", netip.AddrPortFrom(ip, port), err)
		}
		return dev, nil
	}
	// B opens first: where 127.0.0.2 is not configured (macOS has only
	// 127.0.0.1 on lo0) and -b was not given, B takes A's address and the
	// next port, and each device sends to the other's port.
	portA, portB := uint16(*port), uint16(*port)
	devB, err := open(ips[1], portB, portA, 1)
	if err != nil && !bSet && errors.Is(err, link.ErrAddress) && ips[0] != ips[1] && portB < 65535 {
		fmt.Fprintf(out, "(%v; device B uses %s port %d instead)\n", err, ips[0], portB+1)
		ips[1], portB = ips[0], portB+1
		devB, err = open(ips[1], portB, portA, 1)
	}
	if err != nil {
		return err
	}
	defer devB.Close()
	devA, err := open(ips[0], portA, portB, 0)
	if err != nil {
		return err
	}
	defer devA.Close()
	sides := [2]*demoSide{{name: "A", dev: devA, port: portA}, {name: "B", dev: devB, port: portB}}
	a, b := sides[0], sides[1]
	fmt.Fprintf(out, "Two software RDMA devices, talking RoCEv2 over UDP:\n")
	for _, s := range sides {
		g, _ := s.dev.QueryGID(1, 0)
		fmt.Fprintf(out, "  device %s: %s, GID[0] %v, port %d\n", s.name, s.dev.Name(), g, s.port)
	}
	for _, s := range sides {
		if err := s.setup(); err != nil {
			return err
		}
	}
	if err := connect(a, b, pmtu); err != nil {
		return err
	}
	if err := connect(b, a, pmtu); err != nil {
		return err
	}
	fmt.Fprintf(out, "Connected RC queue pairs: A's QP %#x <-> B's QP %#x, path MTU %d.\n\n", a.qp.QPN(), b.qp.QPN(), *mtu)

	steps := []struct {
		title string
		fn    func(a, b *demoSide, out io.Writer) error
	}{
		{"SEND/RECV: B posts a receive buffer, A sends 10000 bytes into it", demoSend},
		{"RDMA WRITE with immediate: A writes into B's memory; B only sees the immediate", demoWriteImm},
		{"RDMA READ: A reads B's memory without B's CPU taking part", demoRead},
		{"Atomics: compare-and-swap and fetch-and-add on a counter in B's memory", demoAtomics},
	}
	for i, st := range steps {
		fmt.Fprintf(out, "%d. %s\n", i+1, st.title)
		if err := st.fn(a, b, out); err != nil {
			return fmt.Errorf("%s: %w", st.title, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	fmt.Fprintf(out, "%d. Bandwidth: A writes 64 KiB messages to B, 16 outstanding, for %v\n", len(steps)+1, *bwTime)
	if err := demoBandwidth(ctx, a, b, *bwTime, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d. Latency: 64-byte SEND ping-pong, %d round trips\n", len(steps)+2, *latIters)
	if err := demoLatency(ctx, a, b, *latIters, out); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nAll operations completed successfully.")
	return nil
}

const demoMem = 4 << 20

func (s *demoSide) setup() error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(256, nil); err != nil {
		return err
	}
	if s.mr, err = s.pd.AllocMR(demoMem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		return err
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	return err
}

// connect moves s's QP to RTS towards peer, as a connection manager would
// after exchanging QPN, PSN and GID.
func connect(s, peer *demoSide, mtu verbs.MTU) error {
	gid, _ := peer.dev.QueryGID(1, 0)
	const psn = 0x1000
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1,
			AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: mtu, DestQPN: peer.qp.QPN(), RQPSN: psn,
			AH: verbs.AHAttr{DGID: gid, PortNum: 1}, MaxDestRdAtomic: 16, MinRNRTimer: 12},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, st := range steps {
		if err := s.qp.Modify(&st.attr, st.mask); err != nil {
			return fmt.Errorf("QP of %s to %v: %w", s.name, st.attr.State, err)
		}
	}
	return nil
}

// wait polls cq for n completions, failing on an error status or after 10 s.
func wait(cq *verbs.CQ, n int) ([]verbs.WC, error) {
	wcs := make([]verbs.WC, n)
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < n {
		k := cq.Poll(wcs[got:])
		for _, wc := range wcs[got : got+k] {
			if wc.Status != verbs.Success {
				return nil, fmt.Errorf("wr_id %d failed: %v", wc.WRID, wc.Status)
			}
		}
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				return nil, errors.New("timed out waiting for completions")
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return wcs, nil
}

func demoSend(a, b *demoSide, out io.Writer) error {
	msg := bytes.Repeat([]byte("softrdma "), 10000/9+1)[:10000]
	copy(a.mr.Buf(), msg)
	if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 16384)}}}); err != nil {
		return err
	}
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, len(msg))}}}); err != nil {
		return err
	}
	if _, err := wait(a.cq, 1); err != nil {
		return err
	}
	wc, err := wait(b.cq, 1)
	if err != nil {
		return err
	}
	if !bytes.Equal(b.mr.Buf()[:len(msg)], msg) {
		return errors.New("received data differs from what was sent")
	}
	fmt.Fprintf(out, "   B's completion: %v, %d bytes, data identical.\n", wc[0].Opcode, wc[0].ByteLen)
	return nil
}

func demoWriteImm(a, b *demoSide, out io.Writer) error {
	for i := 0; i < 65536; i++ {
		a.mr.Buf()[100000+i] = byte(i)
	}
	if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 3}}); err != nil {
		return err
	}
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xC0FFEE,
		SGL: []verbs.SGE{a.mr.SGE(100000, 65536)}, RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()}}); err != nil {
		return err
	}
	if _, err := wait(a.cq, 1); err != nil {
		return err
	}
	wc, err := wait(b.cq, 1)
	if err != nil {
		return err
	}
	if !bytes.Equal(a.mr.Buf()[100000:165536], b.mr.Buf()[200000:265536]) {
		return errors.New("written data differs")
	}
	fmt.Fprintf(out, "   65536 bytes landed at B's address %#x (rkey %#x); B's completion: %v, immediate %#x.\n",
		b.mr.Addr()+200000, b.mr.RKey(), wc[0].Opcode, wc[0].Imm)
	return nil
}

func demoRead(a, b *demoSide, out io.Writer) error {
	copy(b.mr.Buf()[300000:], "data that only B wrote")
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 5, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(300000, 22)}, RemoteAddr: b.mr.Addr() + 300000, RKey: b.mr.RKey()}}); err != nil {
		return err
	}
	if _, err := wait(a.cq, 1); err != nil {
		return err
	}
	fmt.Fprintf(out, "   A read %q; B saw no completion.\n", a.mr.Buf()[300000:300022])
	return nil
}

func demoAtomics(a, b *demoSide, out io.Writer) error {
	binary.NativeEndian.PutUint64(b.mr.Buf()[400000:], 100)
	wrs := []verbs.SendWR{
		{ID: 6, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(400000, 8)},
			RemoteAddr: b.mr.Addr() + 400000, RKey: b.mr.RKey(), CompareAdd: 100, Swap: 500},
		{ID: 7, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(400008, 8)},
			RemoteAddr: b.mr.Addr() + 400000, RKey: b.mr.RKey(), CompareAdd: 25},
	}
	if err := a.qp.PostSend(wrs); err != nil {
		return err
	}
	if _, err := wait(a.cq, 2); err != nil {
		return err
	}
	cas := binary.NativeEndian.Uint64(a.mr.Buf()[400000:])
	faa := binary.NativeEndian.Uint64(a.mr.Buf()[400008:])
	now := binary.NativeEndian.Uint64(b.mr.Buf()[400000:])
	if cas != 100 || faa != 500 || now != 525 {
		return fmt.Errorf("atomics returned %d and %d, counter is %d", cas, faa, now)
	}
	fmt.Fprintf(out, "   CAS(100 -> 500) saw %d; FAA(+25) saw %d; B's counter is now %d.\n", cas, faa, now)
	return nil
}

func demoBandwidth(ctx context.Context, a, b *demoSide, d time.Duration, out io.Writer) error {
	const size, depth = 64 << 10, 16
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	wcs := make([]verbs.WC, depth)
	posted, done := 0, 0
	start := time.Now()
	end := start.Add(d)
	for done < posted || time.Now().Before(end) {
		for posted-done < depth && time.Now().Before(end) {
			wr.ID = uint64(posted)
			if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return err
			}
			posted++
		}
		n := a.cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.Success {
				return fmt.Errorf("write %d: %v", wc.WRID, wc.Status)
			}
		}
		done += n
		if time.Since(start) > d+10*time.Second {
			return errors.New("writes did not complete")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	el := time.Since(start)
	fmt.Fprintf(out, "   %d writes, %.1f MB in %v: %.0f MB/s (%.2f Gb/s)\n", done, float64(done*size)/1e6,
		el.Round(time.Millisecond), float64(done*size)/el.Seconds()/1e6, float64(done*size)*8/el.Seconds()/1e9)
	return nil
}

func demoLatency(ctx context.Context, a, b *demoSide, iters int, out io.Writer) error {
	recv := func(s *demoSide, id uint64) error {
		return s.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{s.mr.SGE(1<<20, 64)}}})
	}
	send := func(s *demoSide, id uint64) error {
		return s.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{s.mr.SGE(2<<20, 64)}}})
	}
	// Unsignaled sends: only the receive completions are polled.
	if err := recv(a, 0); err != nil {
		return err
	}
	if err := recv(b, 0); err != nil {
		return err
	}
	wc := make([]verbs.WC, 4)
	pollRecv := func(s *demoSide) error {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := s.cq.Poll(wc)
			for _, w := range wc[:n] {
				if w.Status != verbs.Success {
					return fmt.Errorf("%v", w.Status)
				}
				if w.Opcode == verbs.WCRecv {
					return nil
				}
			}
			if time.Now().After(deadline) {
				return errors.New("timed out")
			}
		}
	}
	lat := make([]time.Duration, 0, iters)
	for i := 0; i < iters; i++ {
		t0 := time.Now()
		if err := send(a, uint64(i)); err != nil {
			return err
		}
		if err := pollRecv(b); err != nil {
			return err
		}
		if err := recv(b, uint64(i)); err != nil {
			return err
		}
		if err := send(b, uint64(i)); err != nil {
			return err
		}
		if err := pollRecv(a); err != nil {
			return err
		}
		if err := recv(a, uint64(i)); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	slices.Sort(lat)
	fmt.Fprintf(out, "   one-way latency: median %.1f us, p99 %.1f us (half the round trip)\n",
		float64(lat[len(lat)/2].Nanoseconds())/2000, float64(lat[len(lat)*99/100].Nanoseconds())/2000)
	return nil
}

// openTapped opens the demo's device A with a pcap tap.
func openTapped(ip netip.Addr, port uint16, file string, vo verbs.Options) (*verbs.Device, error) {
	ul, err := udp.Open(udp.Config{Addrs: []netip.Addr{ip}, Port: port, Logger: vo.Logger})
	if err != nil {
		return nil, err
	}
	pw, err := pcap.Create(file)
	if err != nil {
		ul.Close()
		return nil, err
	}
	l := pcap.Tap(ul, pw, func(err error) { vo.Logger.Error("pcap tap stopped", "err", err) })
	dev, err := verbs.Open(l, &vo)
	if err != nil {
		l.Close()
		return nil, err
	}
	return dev, nil
}
