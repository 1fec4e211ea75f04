// Run: one side of a perftest-compatible test, following the sequence of
// perftest's programs message for message so either side can be perftest.

package perftest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// cacheLineSize is what softrdma announces as its cache-line size.
const cacheLineSize = 64

// ErrTest is wrapped by errors from the RDMA part of a test (failed
// completions, a stalled peer).
var ErrTest = errors.New("perftest")

// Hooks let tests and the CLI watch a run's progress.
type Hooks struct {
	// Listening is called with the server's TCP listener address.
	Listening func(net.Addr)
	// Listener, if set, is used by the server instead of listening on
	// Config.Port; Run closes it.
	Listener net.Listener
	// CMListening is called in rdma_cm mode when the server listens.
	CMListening func(netip.AddrPort)
	// CM, if set, is the rdma_cm instance of rdma_cm mode; otherwise Run
	// starts one on the device, with CMOptions.
	CM        *rdmacm.CM
	CMOptions *rdmacm.Options
}

// Run runs one side of the test described by cfg on dev. The server listens
// on cfg.Port; the client connects to cfg.Server. The report goes to cfg.Out.
func Run(ctx context.Context, cfg Config, dev *verbs.Device, hooks *Hooks) error {
	if err := cfg.Normalize(); err != nil {
		return err
	}
	s := &side{cfg: &cfg, dev: dev}
	if hooks != nil {
		s.hooks = *hooks
	}
	return s.run(ctx)
}

type side struct {
	cfg   *Config
	dev   *verbs.Device
	hooks Hooks
	conn  *Conn

	// rdma_cm mode
	cm   *rdmacm.CM
	cmCh *rdmacm.EventChannel
	ids  []*rdmacm.ID

	gidIndex  int
	gid       wire.GID
	ib        bool   // the port is InfiniBand: LID addressing, GRH only with -x
	lid       uint16 // the port's LID
	mtu       verbs.MTU
	cycle     int // cycle buffer (page size, the larger of both sides)
	cacheLine int
	buffSize  int // per-QP region: max(size, cycle)
	outReads  int

	pd       *verbs.PD
	mr       *verbs.MR
	buf      []byte
	scq, rcq *verbs.CQ
	qps      []*verbs.QP
	my, rem  []Dest
	recv     *recvState
	ahs      []*verbs.AH // UD: the address of each QP's peer
}

// info is where the report's text other than the result goes: nowhere
// with --output.
func (s *side) info() io.Writer {
	if s.cfg.Output != OutputFull {
		return io.Discard
	}
	return s.cfg.Out
}

func (s *side) run(ctx context.Context) error {
	c := s.cfg
	if c.postListCQ {
		fmt.Fprint(c.Out, ResultLine+"Post List requested - CQ moderation will be the size of the post list\n")
	}
	if err := s.pickGIDAndMTU(); err != nil {
		return err
	}
	var err error
	if c.RDMACM {
		if s.cm = s.hooks.CM; s.cm == nil {
			if s.cm, err = rdmacm.New([]*verbs.Device{s.dev}, s.hooks.CMOptions); err != nil {
				return err
			}
			defer s.cm.Close()
		}
		if c.IsServer() {
			fmt.Fprint(s.info(), "\n************************************\n* Waiting for client to connect... *\n************************************\n")
			s.conn, err = s.cmListen(ctx)
		} else {
			s.conn, err = s.cmDial(ctx)
		}
	} else if c.IsServer() {
		l := s.hooks.Listener
		if l == nil {
			var lerr error
			if l, lerr = Listen(c.Port); lerr != nil {
				return lerr
			}
		}
		if s.hooks.Listening != nil {
			s.hooks.Listening(l.Addr())
		}
		fmt.Fprint(s.info(), "\n************************************\n* Waiting for client to connect... *\n************************************\n")
		s.conn, err = Accept(ctx, l)
		l.Close()
	} else {
		s.conn, err = Dial(ctx, net.JoinHostPort(c.Server, strconv.Itoa(c.Port)))
	}
	if err != nil {
		return err
	}
	defer s.conn.Close()
	if err := s.conn.ExchangeVersions(); err != nil {
		return err
	}
	if s.cycle, s.cacheLine, err = s.conn.ExchangeSysData(os.Getpagesize(), cacheLineSize); err != nil {
		return err
	}
	mtu, err := s.conn.ExchangeMTU(int(s.mtu))
	if err != nil {
		return err
	}
	s.mtu = verbs.MTU(mtu)
	if c.Conn == UD && c.Size > s.mtu.Bytes() {
		// perftest: a UD message is one packet.
		if c.All {
			return fmt.Errorf("%w: max msg size in UD is MTU %d", ErrUsage, s.mtu.Bytes())
		}
		c.Size = s.mtu.Bytes()
	}
	if err := s.setup(); err != nil {
		return err
	}
	defer s.teardown()
	if c.RDMACM {
		if err := s.cmConnectQPs(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	} else if err := s.createQPs(); err != nil {
		return err
	}
	testInfo(s.info(), c, s.dev.Name(), s.mtu.Bytes(), s.gidIndex, s.outReads, s.ib)
	err = s.sequence(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// pickGIDAndMTU applies -x and -m against the device.
func (s *side) pickGIDAndMTU() error {
	c := s.cfg
	port, err := s.dev.QueryPort(1)
	if err != nil {
		return err
	}
	s.ib, s.lid = port.LinkLayer == verbs.LinkLayerInfiniBand, port.LID
	s.mtu = port.ActiveMTU
	if c.MTU != 0 {
		m := verbs.MTUFromBytes(c.MTU)
		if m > port.ActiveMTU {
			fmt.Fprintf(c.Out, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", port.ActiveMTU)
			m = port.ActiveMTU
		}
		s.mtu = m
	}
	s.gidIndex = c.GIDIndex
	if s.ib && s.gidIndex < 0 {
		// perftest on an InfiniBand port: no GID without -x, packets
		// routed by LID alone.
		s.gidIndex = -1
		return nil
	}
	gids := s.dev.GIDs()
	if s.gidIndex < 0 {
		s.gidIndex = 0
		for i, g := range gids {
			if g.Addr().Is4() {
				s.gidIndex = i
				break
			}
		}
	}
	g, err := s.dev.QueryGID(1, s.gidIndex)
	if err != nil {
		return fmt.Errorf("%w: GID index %d: %v", ErrUsage, s.gidIndex, err)
	}
	s.gid = g
	return nil
}

// ah is the address vector towards r (ctx_modify_qp_to_rtr): on an
// InfiniBand port the peer's LID and -S's SL, with a GRH only when -x gave
// a GID index; on RoCE always the GRH.
func (s *side) ah(r *Dest) verbs.AHAttr {
	return verbs.AHAttr{DGID: wire.GID(r.GID), SGIDIndex: max(s.gidIndex, 0), HopLimit: 0xff, PortNum: 1,
		DLID: r.LID, SL: s.cfg.SL, IsGlobal: s.gidIndex >= 0}
}

func inc(size, cacheLine int) int {
	if size > cacheLine {
		return (size + cacheLine - 1) / cacheLine * cacheLine
	}
	return cacheLine
}

// setup creates the PD, the buffer with its MR and the CQs.
func (s *side) setup() error {
	c := s.cfg
	var err error
	s.buffSize = max(c.Size, s.cycle)
	total := inc(s.buffSize, s.cacheLine)*2*c.NumQPs + s.cacheLine
	if c.Conn == UD {
		total += s.cacheLine // a UD receive starts 40 bytes early, for the GRH
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if c.Test.Verb == Atomic {
		access |= verbs.AccessRemoteAtomic
	}
	if s.mr, err = s.pd.AllocMR(total, access); err != nil {
		return err
	}
	s.buf = s.mr.Buf()
	// perftest fills the buffer with random bytes; a pattern does as well.
	for i := range s.buf {
		s.buf[i] = byte(i * 7)
	}
	// The buffer's first byte of each region starts at zero for write_lat's
	// counter polling.
	if !c.Test.BW && c.Test.Verb == Write {
		clear(s.buf)
	}
	if s.scq, err = s.dev.CreateCQ(c.TxDepth*c.NumQPs+16, nil); err != nil {
		return err
	}
	if s.rcq, err = s.dev.CreateCQ(c.RxDepth*c.NumQPs+16, nil); err != nil {
		return err
	}
	s.outReads = 1
	if c.Test.Verb == Read || c.Test.Verb == Atomic {
		s.outReads = s.dev.QueryDevice().MaxQPRdAtom
	}
	if c.Inline > verbs.MaxInline {
		return fmt.Errorf("%w: inline size %d is above the device's %d", ErrUsage, c.Inline, verbs.MaxInline)
	}
	return nil
}

// qpInit are the test QPs' creation attributes.
func (s *side) qpInit() verbs.QPInitAttr {
	c := s.cfg
	recvWR := 1
	if c.Test.Verb == Send {
		recvWR = c.RxDepth
	}
	qt := map[ConnType]verbs.QPType{RC: verbs.RC, UC: verbs.UC, UD: verbs.UD}[c.Conn]
	return verbs.QPInitAttr{Type: qt, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: c.TxDepth, MaxRecvWR: recvWR, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: c.Inline}}
}

// createQPs creates the test QPs in INIT and fills in this side's keys.
func (s *side) createQPs() error {
	qpAccess := map[Verb]verbs.Access{
		Atomic: verbs.AccessRemoteAtomic, Read: verbs.AccessRemoteRead,
		Write: verbs.AccessRemoteWrite, Send: verbs.AccessRemoteWrite | verbs.AccessLocalWrite,
	}[s.cfg.Test.Verb]
	for i := 0; i < s.cfg.NumQPs; i++ {
		qp, err := s.pd.CreateQP(s.qpInit())
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
		attr := verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: qpAccess}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
		if s.cfg.Conn == UD {
			attr.AccessFlags, attr.QKey = 0, defQKey
			mask = mask&^verbs.AttrAccessFlags | verbs.AttrQKey
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("QP to INIT: %w", err)
		}
	}
	s.fillDests()
	return nil
}

// fillDests fills in this side's keys, one per QP (set_up_connection).
func (s *side) fillDests() {
	var rnd [4]byte
	for i, qp := range s.qps {
		_, _ = rand.Read(rnd[:])
		s.my = append(s.my, Dest{
			OutReads: uint32(s.outReads), QPN: qp.QPN(), PSN: wire.PSN(binary.BigEndian.Uint32(rnd[:]) & 0xffffff),
			RKey: s.mr.RKey(), VAddr: s.mr.Addr() + uint64((s.cfg.NumQPs+i)*s.buffSize), GID: s.gid, LID: s.lid,
		})
	}
	s.rem = make([]Dest, len(s.qps))
}

func (s *side) teardown() {
	s.cmTeardown()
	for _, qp := range s.qps {
		qp.Destroy()
	}
	for _, ah := range s.ahs {
		ah.Destroy()
	}
	if s.scq != nil {
		s.scq.Destroy()
	}
	if s.rcq != nil {
		s.rcq.Destroy()
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
}

// exchangeKeys swaps every QP's keys, keeping the peer's.
func (s *side) exchangeKeys() error {
	for i := range s.my {
		d, err := s.conn.ExchangeDest(&s.my[i])
		if err != nil {
			return err
		}
		s.rem[i] = d
	}
	if s.cfg.RDMACM || s.ib {
		return nil // perftest checks GID types only of RoCE without rdma_cm
	}
	first, peer := wire.GID(s.my[0].GID).Addr().Is4(), wire.GID(s.rem[0].GID).Addr().Is4()
	if first != peer {
		return fmt.Errorf("%w: found incompatibility issue with GID types (local %v, remote %v): use the same IP version on both sides",
			ErrExchange, wire.GID(s.my[0].GID), wire.GID(s.rem[0].GID))
	}
	return nil
}

// printKeys prints the local lines, then swaps keys again and prints the
// remote lines, as perftest does after connecting.
func (s *side) printKeys() error {
	verb := s.cfg.Test.Verb
	if s.cfg.RDMACM {
		verb = Send // perftest prints the lines of its exchange QP's verb: no keys
	}
	for i := range s.my {
		printDest(s.info(), "local", verb, &s.my[i], s.ib && s.gidIndex < 0)
	}
	for i := range s.my {
		d, err := s.conn.ExchangeDest(&s.my[i])
		if err != nil {
			return err
		}
		printDest(s.info(), "remote", verb, &d, s.ib && s.gidIndex < 0)
	}
	return nil
}

// connect moves every QP to RTR, and to RTS unless this is a bw server
// (ctx_connect).
func (s *side) connect() error {
	c := s.cfg
	if c.RDMACM {
		return nil // rdma_cm connected the QPs
	}
	if c.Conn == UD {
		return s.connectUD()
	}
	for i, qp := range s.qps {
		r := &s.rem[i]
		if c.Conn == UC {
			if err := s.connectUC(qp, r, &s.my[i]); err != nil {
				return err
			}
			continue
		}
		err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN,
			AH:              s.ah(r),
			MaxDestRdAtomic: min(int(s.my[i].OutReads), verbs.MaxQPRdAtom), MinRNRTimer: 12},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
		if err != nil {
			return fmt.Errorf("QP %#x to RTR: %w", qp.QPN(), err)
		}
		if !c.Test.BW || !c.IsServer() || c.Duplex {
			err = qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: s.my[i].PSN, Timeout: c.Timeout, RetryCnt: 7, RNRRetry: 7,
				MaxRdAtomic: min(max(int(r.OutReads), 1), verbs.MaxQPRdAtom)},
				verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
			if err != nil {
				return fmt.Errorf("QP %#x to RTS: %w", qp.QPN(), err)
			}
		}
	}
	return nil
}

// progress reports the size about to run to Config.Progress.
func (s *side) progress(i, size int) {
	if s.cfg.Progress != nil {
		s.cfg.Progress(i, len(s.sizes()), size)
	}
}

// sizes returns the message sizes to run: all powers of two with -a.
func (s *side) sizes() []int {
	if !s.cfg.All {
		return []int{s.cfg.Size}
	}
	var out []int
	for i := 1; i < 24; i++ {
		out = append(out, 1<<i)
	}
	return out
}

// steps calls each step in turn until one fails, and returns its error.
func steps(fns ...func() error) error {
	for _, f := range fns {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// sequence runs the exchange and the test in the order of the perftest
// program for the test and role.
func (s *side) sequence(ctx context.Context) error {
	c := s.cfg
	out := s.info()
	t := c.Test
	sync0 := func() error { return s.conn.Sync(&s.my[0]) }
	switch {
	case t.BW && t.Verb != Send: // write_bw, read_bw, atomic_bw
		if err := steps(s.exchangeKeys, s.connect, s.printKeys, sync0); err != nil {
			return err
		}
		fmt.Fprint(out, ResultLine+c.bwHeader())
		if c.Duplex {
			return s.duplexBW(ctx)
		}
		if c.IsServer() {
			if err := sync0(); err != nil {
				return err
			}
			r, err := s.conn.ExchangeBWReport(BWReport{})
			if err != nil {
				return err
			}
			s.printBW(r)
			if err := s.conn.Finish(&s.my[0]); err != nil {
				return err
			}
			fmt.Fprint(out, ResultLine)
			return nil
		}
		var last BWReport
		for i, size := range s.sizes() {
			s.progress(i, size)
			r, err := s.runBW(ctx, size)
			if err != nil {
				return err
			}
			s.printBW(r)
			last = r
		}
		fmt.Fprint(out, ResultLine)
		if err := sync0(); err != nil {
			return err
		}
		if _, err := s.conn.ExchangeBWReport(last); err != nil {
			return err
		}
		return s.conn.Finish(&s.my[0])

	case t.BW: // send_bw
		if err := steps(s.exchangeKeys, s.connect, sync0, s.printKeys); err != nil {
			return err
		}
		fmt.Fprint(out, ResultLine+c.bwHeader())
		for i, size := range s.sizes() {
			s.progress(i, size)
			if c.IsServer() {
				if err := s.postRecvs(size); err != nil {
					return err
				}
			}
			if err := sync0(); err != nil {
				return err
			}
			var r BWReport
			var err error
			if c.IsServer() {
				r, err = s.runBWServer(ctx, size)
			} else {
				r, err = s.runBW(ctx, size)
			}
			if err != nil {
				return err
			}
			s.printBW(r)
			if c.All {
				if err := sync0(); err != nil {
					return err
				}
			}
		}
		fmt.Fprint(out, ResultLine)
		return s.conn.Finish(&s.my[0])

	case t.Verb == Send: // send_lat
		if err := steps(s.exchangeKeys, s.connect, sync0, s.printKeys); err != nil {
			return err
		}
		s.printLatHeader()
		for i, size := range s.sizes() {
			s.progress(i, size)
			if err := s.postRecvs(size); err != nil {
				return err
			}
			if err := sync0(); err != nil {
				return err
			}
			r, err := s.runLatSend(ctx, size)
			if err != nil {
				return err
			}
			s.printLat(r)
		}
		fmt.Fprint(out, ResultLine)
		return s.conn.Finish(&s.my[0])

	default: // write_lat, read_lat, atomic_lat
		if err := steps(sync0, s.exchangeKeys, s.connect, s.printKeys, sync0); err != nil {
			return err
		}
		if t.Verb == Write {
			s.printLatHeader()
			for i, size := range s.sizes() {
				s.progress(i, size)
				r, err := s.runLatWrite(ctx, size)
				if err != nil {
					return err
				}
				s.printLat(r)
			}
			fmt.Fprint(out, ResultLine)
			return nil
		}
		if c.IsServer() {
			// Only the client posts READs or atomics; the server waits.
			if err := s.conn.Finish(&s.my[0]); err != nil {
				return err
			}
			fmt.Fprint(out, ResultLine)
			return nil
		}
		s.printLatHeader()
		for i, size := range s.sizes() {
			s.progress(i, size)
			r, err := s.runLatRDMA(ctx, size)
			if err != nil {
				return err
			}
			s.printLat(r)
		}
		if err := s.conn.Finish(&s.my[0]); err != nil {
			return err
		}
		fmt.Fprint(out, ResultLine)
		return nil
	}
}

func (s *side) printLatHeader() {
	h := headerLat
	if s.cfg.Duration > 0 {
		h = headerLatDur
	}
	fmt.Fprint(s.info(), ResultLine+h)
}

// duplexBW is the -b run of write_bw, read_bw and atomic_bw after the
// header: a sync, both sides' loops at once, the report exchange, and the
// sum of both results on each side.
func (s *side) duplexBW(ctx context.Context) error {
	if err := s.conn.Sync(&s.my[0]); err != nil {
		return err
	}
	mine, err := s.runBW(ctx, s.cfg.Size)
	if err != nil {
		return err
	}
	rem, err := s.conn.ExchangeBWReport(mine)
	if err != nil {
		return err
	}
	sum := mine
	sum.BWPeak += rem.BWPeak
	sum.BWAvg += rem.BWAvg
	sum.MsgRate += rem.MsgRate
	s.printBW(sum)
	fmt.Fprint(s.info(), ResultLine)
	return s.conn.Finish(&s.my[0])
}

// printBW prints a bw result line, or with --output its one number.
func (s *side) printBW(r BWReport) {
	switch s.cfg.Output {
	case OutputBandwidth:
		fmt.Fprintf(s.cfg.Out, "%f\n", r.BWAvg)
	case OutputMsgRate:
		fmt.Fprintf(s.cfg.Out, "%f\n", r.MsgRate)
	default:
		printBW(s.cfg.Out, r, s.cfg.Gbits)
	}
}

// printLat prints a latency result line, or with --output the average.
func (s *side) printLat(r LatReport) {
	if s.cfg.Output == OutputLatency {
		fmt.Fprintf(s.cfg.Out, "%f\n", r.Avg)
		return
	}
	printLat(s.cfg.Out, r)
}
