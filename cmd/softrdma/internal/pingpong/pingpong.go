// Package pingpong runs the ping-pong tests of rdma-core's
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong on
// a softrdma device, with the same TCP exchange, defaults and output, so
// that either side can be the C tool.
//
// The exchange (TCP port 18515 by default): the client connects and sends
// one 52-byte message "LLLL:QQQQQQ:PPPPPP:GID" (hex LID, QPN, PSN, 32 hex
// digits of GID, NUL) per QP; the server moves its QPs to RTS and answers
// the same way; the client sends "done". ibv_srq_pingpong always sends 256
// messages (only the first -q mean something).
//
// Differences from the C tools: receives are posted into separate slots of
// one registered buffer rather than all into one buffer (nothing of it shows
// on the wire), so -c can check every message received, not only the last:
// the first byte of each page is 0 and all others 0x7b (0 for srq), which is
// what the C tools send with -c (their client writes the zeros, and their
// server returns what it received). The byte count of each completion is checked
// too, and for UD the source address in the GRH. With -c, invalid data makes
// the run fail, where the C tools print "invalid data in page N" and exit 0.
package pingpong

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Type is the kind of ping-pong.
type Type int

// Ping-pong kinds.
const (
	RC Type = iota
	UC
	UD
	SRQ
)

// ParseType parses "rc", "uc", "ud" or "srq".
func ParseType(s string) (Type, error) {
	switch s {
	case "rc":
		return RC, nil
	case "uc":
		return UC, nil
	case "ud":
		return UD, nil
	case "srq":
		return SRQ, nil
	}
	return 0, fmt.Errorf("%w: --type %q: want rc, uc, ud or srq", tool.ErrUsage, s)
}

func (t Type) String() string { return [...]string{"rc", "uc", "ud", "srq"}[t] }

// Defaults of the C tools.
const (
	DefaultTCPPort = 18515
	DefaultSize    = 4096
	DefaultUDSize  = 1024
	DefaultMTU     = 1024
	DefaultRxDepth = 500
	DefaultIters   = 1000
	DefaultNumQP   = 16
	// UDQKey is the Q_Key of ibv_ud_pingpong.
	UDQKey = 0x11111111
	// GRHLen is the room for the GRH before each UD receive.
	GRHLen = 40
	// maxQP is ibv_srq_pingpong's limit on -q (its MAX_QP - 1).
	maxQP = SRQLines - 1
	// maxRecvArea bounds rx depth x message size.
	maxRecvArea = 1 << 30
)

// Work request IDs: the C tools' values; receives carry their slot above.
const (
	recvWRID = 1
	sendWRID = 2
)

// Config is a ping-pong run.
type Config struct {
	Type Type
	// Host is the server to connect to; "" runs the server.
	Host    string
	TCPPort int
	// Listener, if set, is where a server accepts instead of TCPPort.
	Listener net.Listener
	Size     int
	MTU      int // path MTU in bytes (RC, UC, SRQ)
	RxDepth  int
	Iters    int
	SL       int
	NumQP    int // SRQ
	Events   bool
	Check    bool
	// Timestamps is ibv_rc_pingpong's -t: the CQ stamps completions with
	// the device clock, and the run reports the smallest, largest and mean
	// interval between consecutive receive completions, in device clock
	// cycles (nanoseconds on softrdma). RC only.
	Timestamps bool
	// Timeout gives up when no client connects (server) or no completion
	// arrives for this long (0: wait forever, as the C tools do).
	Timeout time.Duration
	Out     io.Writer
}

// Result is what a run measured.
type Result struct {
	Bytes   int64
	Iters   int
	Elapsed time.Duration
	// RecvTS are the receive completion intervals of a -t run.
	RecvTS TSStats
}

// TSStats are the intervals between consecutive receive completions of a
// -t run, in device clock cycles (ibv_rc_pingpong's ts_params).
type TSStats struct {
	Max, Min, Total uint64
	N               int // intervals measured
	prev            uint64
	have            bool
}

// add takes the timestamp of a receive completion; mask is the clock's
// range, for a clock that wraps between two completions.
func (t *TSStats) add(ts, mask uint64) {
	if t.have {
		d := ts - t.prev
		if ts < t.prev {
			d = mask - t.prev + ts + 1
		}
		if t.N == 0 {
			t.Min = d
		}
		t.Max, t.Min = max(t.Max, d), min(t.Min, d)
		t.Total += d
		t.N++
	}
	t.prev, t.have = ts, true
}

// ErrData is wrapped by the errors -c reports.
var ErrData = errors.New("invalid data")

type run struct {
	cfg  Config
	dev  *tool.Device
	pd   *verbs.PD
	cq   *verbs.CQ
	ch   *verbs.CompChannel
	srq  *verbs.SRQ
	qps  []*verbs.QP
	ah   *verbs.AH
	smr  *verbs.MR // send buffer
	rmr  *verbs.MR // receive slots
	slot int       // receive slot length
	free []int     // free receive slots
	mine []Dest
	rem  []Dest
	mtu  verbs.MTU
	grh  bool // packets carry a GRH (always on RoCE)
	// inline is the QPs' max_inline_data: messages up to it are sent
	// inline.
	inline int
}

// Run runs one ping-pong on dev and prints the C tools' lines to cfg.Out.
func Run(ctx context.Context, dev *tool.Device, cfg Config) (res Result, err error) {
	if err := cfg.check(); err != nil {
		return res, err
	}
	r := &run{cfg: cfg, dev: dev}
	defer r.close()
	if err := r.setup(); err != nil {
		return res, err
	}
	if err := r.exchange(ctx); err != nil {
		return res, err
	}
	return r.loop(ctx)
}

func (c *Config) check() error {
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.TCPPort == 0 {
		c.TCPPort = DefaultTCPPort
	}
	if c.TCPPort < 0 || c.TCPPort > 65535 {
		return fmt.Errorf("%w: TCP port %d", tool.ErrUsage, c.TCPPort)
	}
	if c.Timestamps && c.Type != RC {
		return fmt.Errorf("%w: completion timestamps (-t) are an option of the rc pingpong only", tool.ErrUsage)
	}
	if c.Size < 1 || c.RxDepth < 1 || c.Iters < 1 {
		return fmt.Errorf("%w: size %d, rx depth %d and iters %d must be positive", tool.ErrUsage, c.Size, c.RxDepth, c.Iters)
	}
	if c.Type != UD && verbs.MTUFromBytes(c.MTU).Bytes() != c.MTU {
		return fmt.Errorf("%w: MTU %d is not 256, 512, 1024, 2048 or 4096", tool.ErrUsage, c.MTU)
	}
	if c.Type == SRQ {
		if c.NumQP < 1 || c.NumQP > maxQP {
			return fmt.Errorf("%w: num_qp %d must be between 1 and %d", tool.ErrUsage, c.NumQP, maxQP)
		}
		if c.NumQP > c.RxDepth {
			return fmt.Errorf("%w: rx_depth %d is too small for %d QPs -- must have at least one receive per QP", tool.ErrUsage, c.RxDepth, c.NumQP)
		}
	} else {
		c.NumQP = 1
	}
	if int64(c.RxDepth)*int64(c.Size+GRHLen) > maxRecvArea {
		return fmt.Errorf("%w: rx depth %d x size %d is more than %d bytes of receive buffers", tool.ErrUsage, c.RxDepth, c.Size, maxRecvArea)
	}
	return nil
}

func (r *run) setup() error {
	cfg, dev := &r.cfg, r.dev
	port, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	if cfg.Type == UD && cfg.Size > port.ActiveMTU.Bytes() {
		return fmt.Errorf("%w: requested size larger than port MTU (%d)", tool.ErrUsage, port.ActiveMTU.Bytes())
	}
	r.mtu = verbs.MTUFromBytes(cfg.MTU)
	if r.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	r.slot = cfg.Size
	if cfg.Type == UD {
		r.slot += GRHLen // receives start with the GRH
	}
	sbuf := make([]byte, cfg.Size)
	fill(sbuf, cfg.fillByte(), cfg.Check)
	if r.smr, err = r.pd.RegMR(sbuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if r.rmr, err = r.pd.RegMR(make([]byte, cfg.RxDepth*r.slot), verbs.AccessLocalWrite); err != nil {
		return err
	}
	r.ch = dev.CreateCompChannel() // -e sleeps on it; polling does when idle
	var cqAttr verbs.CQAttr
	if cfg.Timestamps {
		if dev.QueryDevice().CompletionTimestampMask == 0 {
			return errors.New("the device isn't completion timestamp capable")
		}
		cqAttr.Timestamps = verbs.WCWithCompletionTimestamp
	}
	if r.cq, err = dev.CreateCQEx(cfg.RxDepth+cfg.NumQP, r.ch, cqAttr); err != nil {
		return err
	}
	caps := verbs.QPCap{MaxSendWR: 1, MaxRecvWR: cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	if cfg.Type == SRQ {
		if r.srq, err = r.pd.CreateSRQ(verbs.SRQAttr{MaxWR: cfg.RxDepth, MaxSGE: 1}); err != nil {
			return err
		}
		caps.MaxRecvWR, caps.MaxRecvSGE = 0, 0
	}
	qt := map[Type]verbs.QPType{RC: verbs.RC, UC: verbs.UC, UD: verbs.UD, SRQ: verbs.RC}[cfg.Type]
	for range cfg.NumQP {
		qp, err := r.pd.CreateQP(verbs.QPInitAttr{Type: qt, SendCQ: r.cq, RecvCQ: r.cq, SRQ: r.srq, Cap: caps})
		if err != nil {
			return err
		}
		r.qps = append(r.qps, qp)
		// As the C tools: inline when the QP's max_inline_data (as
		// created, here what was asked: none) holds the message.
		_, ia := qp.Query()
		r.inline = ia.Cap.MaxInlineData
		attr := verbs.QPAttr{State: verbs.StateInit, PKeyIndex: 0, PortNum: 1}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if cfg.Type == UD {
			attr.QKey = UDQKey
			mask |= verbs.AttrQKey
		} else {
			mask |= verbs.AttrAccessFlags
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %w", err)
		}
	}
	for i := range cfg.RxDepth {
		r.free = append(r.free, i)
	}
	if n := r.postRecv(cfg.RxDepth); n < cfg.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", n)
	}
	for _, qp := range r.qps {
		var psn [4]byte
		_, _ = rand.Read(psn[:])
		d := Dest{LID: port.LID, QPN: qp.QPN(), PSN: wire.PSN(binary.BigEndian.Uint32(psn[:]) & 0xffffff), GID: dev.GID}
		r.mine = append(r.mine, d)
		sep := ","
		if cfg.Type == UD {
			sep = ":" // as ibv_ud_pingpong prints it
		}
		fmt.Fprintf(cfg.Out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %v\n", d.LID, d.QPN, d.PSN, sep, d.GID)
	}
	return nil
}

// fillByte is what the C tool fills its buffer with: 0 for srq, 0x7b
// for the others.
func (c *Config) fillByte() byte {
	if c.Type == SRQ {
		return 0
	}
	return 0x7b
}

// fill writes the message pattern: v, and with check 0 at each page start.
func fill(b []byte, v byte, check bool) {
	for i := range b {
		b[i] = v
	}
	if check {
		for i := 0; i < len(b); i += pageSize {
			b[i] = 0
		}
	}
}

// pageSize is the page size the C tools' -c uses on Linux x86 and arm64.
const pageSize = 4096

// postRecv posts up to n receives into free slots and returns how many.
func (r *run) postRecv(n int) int {
	posted := 0
	for posted < n && len(r.free) > 0 {
		s := r.free[len(r.free)-1]
		wr := []verbs.RecvWR{{ID: recvWRID | uint64(s)<<8, SGL: []verbs.SGE{r.rmr.SGE(s*r.slot, r.slot)}}}
		var err error
		if r.srq != nil {
			err = r.srq.PostRecv(wr)
		} else {
			err = r.qps[0].PostRecv(wr)
		}
		if err != nil {
			break
		}
		r.free = r.free[:len(r.free)-1]
		posted++
	}
	return posted
}

func (r *run) postSend(i int) error {
	wr := verbs.SendWR{ID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.smr.SGE(0, r.cfg.Size)}}
	if r.cfg.Size <= r.inline {
		wr.Flags |= verbs.SendInline
	}
	if r.cfg.Type == UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ah, r.rem[i].QPN, UDQKey
	}
	return r.qps[i].PostSend([]verbs.SendWR{wr})
}

func (r *run) exchange(ctx context.Context) error {
	cfg := &r.cfg
	lines := 1
	if cfg.Type == SRQ {
		lines = SRQLines
	}
	var err error
	if cfg.Host != "" {
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.TCPPort))
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
		c, derr := d.DialContext(dctx, "tcp", addr)
		cancel()
		if derr != nil {
			return fmt.Errorf("couldn't connect to %s: %w", addr, derr)
		}
		defer c.Close()
		if r.rem, err = ClientExchange(ctx, c, r.mine, lines); err != nil {
			return err
		}
		r.printRemote()
		return r.connect(r.rem)
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", ":"+strconv.Itoa(cfg.TCPPort)); err != nil {
			return fmt.Errorf("couldn't listen to port %d: %w", cfg.TCPPort, err)
		}
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, cfg.Timeout)
	}
	stop := context.AfterFunc(actx, func() { ln.Close() })
	c, aerr := ln.Accept()
	stop()
	cancel()
	ln.Close()
	if aerr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if actx.Err() != nil {
			return fmt.Errorf("no client connected within %v", cfg.Timeout)
		}
		return fmt.Errorf("accept() failed: %w", aerr)
	}
	defer c.Close()
	if r.rem, err = ServerExchange(ctx, c, r.mine, lines, r.connect); err != nil {
		return err
	}
	r.printRemote()
	return nil
}

func (r *run) printRemote() {
	for _, d := range r.rem {
		fmt.Fprintf(r.cfg.Out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %v\n", d.LID, d.QPN, d.PSN, d.GID)
	}
}

// connect moves the QPs to RTS towards the remote destinations.
func (r *run) connect(rem []Dest) error {
	cfg := &r.cfg
	for i, d := range rem {
		// The C tools route by GID only if its interface ID is not zero;
		// RoCE needs a GID, an InfiniBand port routes by LID without.
		global, err := r.dev.UseGRH(d.GID)
		if err != nil {
			return err
		}
		r.grh = global
		if r.dev.IsIB() {
			if d.LID == 0 {
				return fmt.Errorf("%w: remote QP 0x%06x has LID 0: the peer's port has no LID (is it on the fabric?)", ErrExchange, d.QPN)
			}
		} else if binary.BigEndian.Uint64(d.GID[8:]) == 0 {
			return fmt.Errorf("%w: remote QP 0x%06x has no GID (%v): run the peer with -g", ErrExchange, d.QPN, d.GID)
		} else if dg, lg := d.GID.Addr(), r.dev.GID.Addr(); dg.Is4() != lg.Is4() {
			return fmt.Errorf("%w: remote GID %v and local GID %v (index %d) differ in IP version: choose -g to match", ErrExchange, d.GID, r.dev.GID, r.dev.GIDIndex)
		}
		qp := r.qps[i]
		if cfg.Type == UD {
			if err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState); err != nil {
				return fmt.Errorf("failed to modify QP to RTR: %w", err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: r.mine[i].PSN}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %w", err)
			}
			ah, err := r.pd.CreateAH(verbs.AHAttr{DGID: d.GID, SGIDIndex: max(r.dev.GIDIndex, 0), HopLimit: 64, SL: uint8(cfg.SL),
				DLID: d.LID, IsGlobal: global, PortNum: 1})
			if err != nil {
				return fmt.Errorf("failed to create AH: %w", err)
			}
			r.ah = ah
			continue
		}
		attr := verbs.QPAttr{State: verbs.StateRTR, PathMTU: r.mtu, DestQPN: d.QPN, RQPSN: d.PSN,
			AH: verbs.AHAttr{DGID: d.GID, SGIDIndex: max(r.dev.GIDIndex, 0), HopLimit: 1, SL: uint8(cfg.SL), DLID: d.LID,
				IsGlobal: global, PortNum: 1}}
		mask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if qp.Type() == verbs.RC {
			attr.MaxDestRdAtomic, attr.MinRNRTimer = 1, 12
			mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %w", err)
		}
		attr = verbs.QPAttr{State: verbs.StateRTS, SQPSN: r.mine[i].PSN}
		mask = verbs.AttrState | verbs.AttrSQPSN
		if qp.Type() == verbs.RC {
			attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = 14, 7, 7, 1
			mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %w", err)
		}
	}
	return nil
}

func (r *run) loop(ctx context.Context) (Result, error) {
	cfg := &r.cfg
	n := len(r.qps)
	pending := make([]int, n)
	for i := range pending {
		pending[i] = recvWRID
	}
	if cfg.Host != "" {
		for i := range r.qps {
			if err := r.postSend(i); err != nil {
				return Result{}, fmt.Errorf("couldn't post send: %w", err)
			}
			pending[i] |= sendWRID
		}
	}
	qpIndex := make(map[wire.QPN]int, n)
	for i, qp := range r.qps {
		qpIndex[qp.QPN()] = i
	}
	refill := 1 // repost when this few receives remain (C: 1, srq: num_qp)
	if cfg.Type == SRQ {
		refill = cfg.NumQP
	}
	routs := cfg.RxDepth
	wcs := make([]verbs.WC, max(2, cfg.RxDepth+cfg.NumQP))
	start := time.Now()
	last := start
	rcnt, scnt := 0, 0
	var ts TSStats
	mask := r.dev.QueryDevice().CompletionTimestampMask
	for rcnt < cfg.Iters || scnt < cfg.Iters {
		ne, err := r.poll(ctx, wcs, last)
		if err != nil {
			return Result{}, err
		}
		if ne > 0 {
			last = time.Now()
		}
		for _, wc := range wcs[:ne] {
			if wc.Status != verbs.Success {
				return Result{}, fmt.Errorf("failed status %v (%d) for wr_id %d", wc.Status, int(wc.Status), wc.WRID&0xff)
			}
			qi, ok := qpIndex[wc.QPNum]
			if !ok {
				return Result{}, fmt.Errorf("couldn't find QPN %06x", wc.QPNum)
			}
			id := int(wc.WRID & 0xff)
			switch id {
			case sendWRID:
				scnt++
			case recvWRID:
				s := int(wc.WRID >> 8)
				if cfg.Check {
					if err := r.validate(s, wc, qi, rcnt); err != nil {
						// The C tools' line, then the reason for the
						// failure, not the same words twice.
						fmt.Fprintln(cfg.Out, err)
						return Result{}, fmt.Errorf("%w: -c found the message above wrong; both sides need -c (without it the peer sends no pattern)", ErrData)
					}
				}
				r.free = append(r.free, s)
				if routs--; routs <= refill {
					routs += r.postRecv(cfg.RxDepth - routs)
					if routs < cfg.RxDepth {
						return Result{}, fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
				if cfg.Timestamps {
					ts.add(wc.Timestamp, mask)
				}
			default:
				return Result{}, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			pending[qi] &^= id
			if scnt < cfg.Iters && pending[qi] == 0 {
				if err := r.postSend(qi); err != nil {
					return Result{}, fmt.Errorf("couldn't post send: %w", err)
				}
				pending[qi] = recvWRID | sendWRID
			}
		}
	}
	el := time.Since(start)
	res := Result{Bytes: int64(cfg.Size) * int64(cfg.Iters) * 2, Iters: cfg.Iters, Elapsed: el, RecvTS: ts}
	usec := float64(el.Nanoseconds()) / 1e3
	fmt.Fprintf(cfg.Out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", res.Bytes, usec/1e6, float64(res.Bytes)*8/usec)
	fmt.Fprintf(cfg.Out, "%d iters in %.2f seconds = %.2f usec/iter\n", res.Iters, usec/1e6, usec/float64(res.Iters))
	if cfg.Timestamps && ts.N > 0 {
		fmt.Fprintf(cfg.Out, "Max receive completion clock cycles = %d\n", ts.Max)
		fmt.Fprintf(cfg.Out, "Min receive completion clock cycles = %d\n", ts.Min)
		fmt.Fprintf(cfg.Out, "Average receive completion clock cycles = %f\n", float64(ts.Total)/float64(ts.N))
	}
	return res, nil
}

// spinPolls is how often poll tries the CQ before it sleeps on the
// completion channel: busy polling alone, as the C tools do, starves the
// link's goroutines when the processor is shared.
const spinPolls = 100

// poll returns the next completions: polling the CQ for a while (not with
// -e), then waiting for a CQ event. It fails after cfg.Timeout without a
// completion since last.
func (r *run) poll(ctx context.Context, wcs []verbs.WC, last time.Time) (int, error) {
	if !r.cfg.Events {
		for range spinPolls {
			if n := r.cq.Poll(wcs); n > 0 {
				return n, nil
			}
			runtime.Gosched()
		}
	}
	var expire <-chan time.Time
	if r.cfg.Timeout > 0 {
		t := time.NewTimer(time.Until(last.Add(r.cfg.Timeout)))
		defer t.Stop()
		expire = t.C
	}
	for {
		if err := r.cq.ReqNotify(false); err != nil {
			return 0, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
		if n := r.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		select {
		case <-r.ch.C():
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-expire:
			return 0, fmt.Errorf("no completion for %v: is the peer still running?", r.cfg.Timeout)
		}
	}
}

// validate checks the message in receive slot s.
func (r *run) validate(s int, wc verbs.WC, qi, iter int) error {
	cfg := &r.cfg
	b := r.rmr.Buf()[s*r.slot : (s+1)*r.slot]
	want := cfg.Size
	if cfg.Type == UD {
		want += GRHLen
		if got := wc.Flags&verbs.WCGRH != 0; r.dev.IsIB() && got != r.grh {
			return fmt.Errorf("%w: message %d: GRH present %v, want %v", ErrData, iter, got, r.grh)
		}
		switch {
		case r.grh:
			if src := grhSource(b[:GRHLen]); src != r.rem[qi].GID.Addr() {
				return fmt.Errorf("%w: message %d: GRH source %v, want the peer's GID %v", ErrData, iter, src, r.rem[qi].GID)
			}
		case wc.SLID != r.rem[qi].LID:
			// No GRH on an InfiniBand port: the LRH's source LID names
			// the sender.
			return fmt.Errorf("%w: message %d: source LID %#x, want the peer's LID %#x", ErrData, iter, wc.SLID, r.rem[qi].LID)
		}
		b = b[GRHLen:]
	}
	if int(wc.ByteLen) != want {
		return fmt.Errorf("%w: message %d: %d bytes received, want %d", ErrData, iter, wc.ByteLen, want)
	}
	for i, v := range b {
		exp := cfg.fillByte()
		if i%pageSize == 0 {
			exp = 0
		}
		if v != exp {
			return fmt.Errorf("%w in page %d: message %d, byte %d is 0x%02x, want 0x%02x", ErrData, i/pageSize, iter, i, v, exp)
		}
	}
	return nil
}

// grhSource returns the source address in a UD receive's GRH area: an IPv6
// header, or for IPv4 the IPv4 header in its last 20 bytes.
func grhSource(g []byte) netip.Addr {
	if g[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(g[8:24]))
	}
	return netip.AddrFrom4([4]byte(g[20+12 : 20+16]))
}

func (r *run) close() {
	for _, qp := range r.qps {
		qp.Destroy()
	}
	if r.ah != nil {
		r.ah.Destroy()
	}
	if r.srq != nil {
		r.srq.Destroy()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	for _, mr := range []*verbs.MR{r.smr, r.rmr} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
}
