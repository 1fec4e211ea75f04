// The measurement loops: perftest's run_iter_bw, run_iter_bw_server,
// run_iter_lat_write, run_iter_lat and run_iter_lat_send on softrdma verbs.

package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// stallLimit is how long a loop waits without any progress before giving up
// (perftest's server gives up after 60-120 s without a message).
const stallLimit = 60 * time.Second

// Duration-mode states (perftest's START, SAMPLE, STOP_SAMPLE, END).
const (
	stateWarmup = iota
	stateSample
	stateCooldown
	stateEnd
)

// clock measures a run: monotonic time since the run started, and in
// duration mode the state and sample window.
type clock struct {
	base       time.Time
	dur        time.Duration
	margin     time.Duration
	started    bool
	sampleFrom time.Duration
	sampleTo   time.Duration
	cur        int // state at the last advance
}

func newClock(dur, margin time.Duration) *clock {
	return &clock{base: time.Now(), dur: dur, margin: margin, started: true}
}

func (k *clock) now() time.Duration { return time.Since(k.base) }

// state returns the duration-mode state at now.
func (k *clock) state(now time.Duration) int {
	switch {
	case !k.started || now < k.margin:
		return stateWarmup
	case now < k.dur-k.margin:
		return stateSample
	case now < k.dur:
		return stateCooldown
	}
	return stateEnd
}

// advance moves the duration-mode state to now's, marking where the sample
// window starts and ends as the run enters and leaves it, and returns it.
func (k *clock) advance(now time.Duration) int {
	st := k.state(now)
	if st != k.cur {
		if st >= stateSample && k.cur < stateSample {
			k.sampleFrom = now
		}
		if st >= stateCooldown && k.cur < stateCooldown {
			k.sampleTo = now
		}
		k.cur = st
	}
	return st
}

// watchdog paces a waiting loop and fails it when it makes no progress.
//
// A waiting loop polls without sleeping, as perftest does, yielding to
// the process's other goroutines on every empty poll, and the CPU to other
// threads (sched_yield): when both sides and the threads that carry their
// packets share a few CPUs, pure spinning makes each round trip wait for a
// scheduler tick, while a yield costs under a microsecond when nothing
// else wants the CPU (not a sleep: Go rounds sleeps below a millisecond up
// to one when the process is otherwise idle). Measured on a loaded 2-CPU
// host, two processes: write_lat 3 ms typical spinning, 45-60 us yielding.
// A latency test's polls receive themselves (unless Config.NoPollReceive),
// so the one packet it waits for needs no other thread: there the CPU
// yield only hands the CPU to threads with nothing to do with the round
// trip, and it is left out (two unpinned processes' SEND round trip: 96-98
// us with it, 24-25 us without). A bandwidth test keeps it: without it two
// unpinned processes moved 1.1-1.5 GB/s instead of 1.5-2.0.
//
// The loop that polls memory (write_lat) first has the device receive on
// this goroutine (verbs.Device.Poll; CQ polls do so by themselves), and
// yields only if nothing came, unless Config.NoPollReceive.
//
// With Config.Events, a loop with nothing to do sleeps in CQ.Wait (await)
// instead; a timer reset by each progress cancels the wait after
// stallLimit.
type watchdog struct {
	ctx     context.Context
	last    time.Time // when idle last saw progress
	moved   bool      // progress since idle last looked
	what    string
	n       int
	poll    func() int // Device.Poll, for the loop that polls memory
	yieldOS bool       // idle yields the CPU too (sched_yield)
	// Events: the waits' context, and the stall timer that cancels it.
	waitCtx context.Context
	stall   *time.Timer
	cancel  context.CancelFunc
}

func (s *side) newWatchdog(ctx context.Context, what string) *watchdog {
	w := &watchdog{ctx: ctx, last: time.Now(), what: what, yieldOS: true}
	if s.cfg.Events {
		w.waitCtx, w.cancel = context.WithCancel(ctx)
		w.stall = time.AfterFunc(stallLimit, w.cancel)
	}
	return w
}

// newLatWatchdog is newWatchdog for a latency test's loop, which yields the
// CPU only if its polls do not receive (see watchdog).
func (s *side) newLatWatchdog(ctx context.Context, what string) *watchdog {
	w := s.newWatchdog(ctx, what)
	w.yieldOS = s.cfg.NoPollReceive
	return w
}

// stop releases the watchdog's timer and context.
func (w *watchdog) stop() {
	if w.stall != nil {
		w.stall.Stop()
		w.cancel()
	}
}

func (w *watchdog) progress() {
	w.moved = true // (idle reads the clock: a read a completion was a tenth of a microsecond)
	if w.stall != nil {
		w.stall.Reset(stallLimit)
	}
}

// await is what a loop that found cq empty does: with Config.Events it
// sleeps until cq holds a completion and moves some into wcs (returning
// how many), otherwise it yields (idle) and returns 0.
func (w *watchdog) await(cq *verbs.CQ, wcs []verbs.WC) (int, error) {
	if w.waitCtx == nil {
		return 0, w.idle()
	}
	n, err := cq.Wait(w.waitCtx, wcs)
	if err != nil {
		if err := w.ctx.Err(); err != nil {
			return 0, err
		}
		if w.waitCtx.Err() != nil {
			return 0, fmt.Errorf("%w: no progress for %v while %s", ErrTest, stallLimit, w.what)
		}
		return 0, fmt.Errorf("%w: %s: %v", ErrTest, w.what, err)
	}
	return n, nil
}

// idle yields the processor to other processes and goroutines, and checks
// for cancellation and stalls.
func (w *watchdog) idle() error {
	w.n++
	if w.poll == nil || w.poll() == 0 {
		if w.yieldOS {
			osYield()
		}
		// A latency loop that receives itself yields to the process's
		// other goroutines every 1024th empty poll (some 0.6 ms of
		// polling), as often as it looks for a stall: each pass through
		// the scheduler reads the clock for its timers and runs those
		// due (the device's ACK timer goes off every 50 us in a
		// ping-pong, a goroutine each time), and that lengthened the
		// wait for the peer's packet. A yield every poll cost 0.24 us a
		// half round trip against every 8th, and every 8th 0.04-0.07
		// against every 1024th. Go preempts a goroutine after 10 ms
		// regardless.
		if w.yieldOS || w.n&0x3ff == 0 {
			runtime.Gosched()
		}
	}
	if w.n&0x3ff != 0 {
		return nil
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	if w.moved {
		w.moved, w.last = false, now
	} else if now.Sub(w.last) > stallLimit {
		return fmt.Errorf("%w: no progress for %v while %s", ErrTest, stallLimit, w.what)
	}
	return nil
}

func wcError(wc *verbs.WC, what string) error {
	return fmt.Errorf("%w: %s completion with error: status %d (%v), wr_id %d, QP %#x", ErrTest, what, int(wc.Status), wc.Status, wc.WRID, wc.QPNum)
}

// opcode returns the work request opcode of the test.
func (s *side) opcode() verbs.WROpcode {
	switch s.cfg.Test.Verb {
	case Write:
		return verbs.WRRDMAWrite
	case Read:
		return verbs.WRRDMARead
	case Atomic:
		if s.cfg.Atomic == CmpAndSwap {
			return verbs.WRAtomicCmpAndSwp
		}
		return verbs.WRAtomicFetchAndAdd
	}
	return verbs.WRSend
}

// sendWR builds the work request template of QP i for a message size.
func (s *side) sendWR(i, size int) verbs.SendWR {
	wr := verbs.SendWR{Opcode: s.opcode(), SGL: []verbs.SGE{s.mr.SGE(i*s.buffSize, size)}}
	switch s.cfg.Test.Verb {
	case Write, Read:
		wr.RemoteAddr, wr.RKey = s.rem[i].VAddr, s.rem[i].RKey
	case Atomic:
		wr.RemoteAddr, wr.RKey = s.rem[i].VAddr, s.rem[i].RKey
		if s.cfg.Atomic == FetchAndAdd {
			wr.CompareAdd = 1
		} else {
			wr.Swap = 0
		}
	}
	if (s.cfg.Test.Verb == Send || s.cfg.Test.Verb == Write) && size <= s.cfg.Inline {
		wr.Flags |= verbs.SendInline
	}
	if s.cfg.Conn == UD && i < len(s.ahs) {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs[i], s.rem[i].QPN, defQKey
	}
	return wr
}

// cycleOffset is where message k goes inside a region: small messages walk
// the cycle buffer in cache-line steps, as perftest's increase_*_addr do.
func (s *side) cycleOffset(k uint64, size int) int {
	if size > s.cycle/2 {
		return 0
	}
	step := inc(size, s.cacheLine)
	return int(k%uint64(s.cycle/step)) * step
}

// runBW is the bw client (run_iter_bw): up to tx_depth messages in flight per
// QP, a completion every cq_mod messages and for the last one.
func (s *side) runBW(ctx context.Context, size int) (BWReport, error) {
	c := s.cfg
	nq := len(s.qps)
	iters := c.Iters
	dur := c.Duration > 0
	total := iters * nq
	t := &bwTimes{cqMod: c.CQMod, noPeak: dur}
	if !dur {
		t.posted = make([]time.Duration, total)
		t.completed = make([]time.Duration, total)
	}
	// Each QP posts a list of PostList WRs per call (-l): WR j of a list
	// uses cycle slot j, as perftest's ctx_set_send_wqes sets them up.
	pl := c.PostList
	wrs := make([][]verbs.SendWR, nq)
	for i := range wrs {
		wrs[i] = make([]verbs.SendWR, pl)
		for j := range wrs[i] {
			wrs[i][j] = s.sendWR(i, size)
			wrs[i][j].SGL = []verbs.SGE{s.mr.SGE(i*s.buffSize, size)}
			if pl > 1 {
				off := s.cycleOffset(uint64(j), size)
				wrs[i][j].SGL[0].Addr += uint64(off)
				if c.Test.Verb != Send {
					wrs[i][j].RemoteAddr += uint64(off)
				}
			}
		}
	}
	scnt := make([]uint64, nq)
	ccnt := make([]uint64, nq)
	var totS, totC, sampled uint64
	wcs := make([]verbs.WC, 16)
	wd := s.newWatchdog(ctx, fmt.Sprintf("waiting for %s completions", c.Test.Verb))
	defer wd.stop()
	k := newClock(c.Duration, c.margin)
	signaled := func(n uint64) bool {
		return n%uint64(c.CQMod) == uint64(c.CQMod)-1 || (!dur && n == uint64(iters)-1)
	}
	// lastSignaled is how many completions are due once posting stops.
	lastSignaled := func(i int) uint64 {
		n := scnt[i]
		for n > ccnt[i] && !signaled(n-1) {
			n--
		}
		return n
	}
	state := stateWarmup
	for {
		now := k.now()
		if dur {
			state = k.advance(now)
		}
		ending := dur && state == stateEnd
		if !dur && totS >= uint64(total) && totC >= uint64(total) {
			break
		}
		if ending {
			done := true
			for i := range s.qps {
				if ccnt[i] < lastSignaled(i) {
					done = false
				}
			}
			if done {
				break
			}
		}
		for i, qp := range s.qps {
			for !ending && (dur || scnt[i] < uint64(iters)) && scnt[i]-ccnt[i]+uint64(pl) <= uint64(c.TxDepth) {
				n := scnt[i]
				for j := range wrs[i] {
					wr := &wrs[i][j]
					if pl == 1 {
						off := s.cycleOffset(n, size)
						wr.SGL[0].Addr = s.mr.Addr() + uint64(i*s.buffSize+off)
						if c.Test.Verb != Send {
							wr.RemoteAddr = s.rem[i].VAddr + uint64(off)
						}
					}
					// IDs count messages: a completion covers all up to
					// its own (lists are whole multiples of the CQ
					// moderation, so the last of a list is signaled).
					wr.ID = n + uint64(j)
					wr.Flags &^= verbs.SendSignaled
					if signaled(n + uint64(j)) {
						wr.Flags |= verbs.SendSignaled
					}
				}
				if !dur {
					now := k.now()
					for j := range pl {
						t.posted[int(totS)+j] = now
					}
				}
				if err := qp.PostSend(wrs[i]); err != nil {
					return BWReport{}, fmt.Errorf("%w: post send on QP %#x (message %d): %v", ErrTest, qp.QPN(), n, err)
				}
				scnt[i] += uint64(pl)
				totS += uint64(pl)
			}
		}
		n := s.scq.Poll(wcs)
		if n == 0 {
			var err error
			if n, err = wd.await(s.scq, wcs); err != nil {
				return BWReport{}, err
			}
			if n == 0 {
				continue
			}
		}
		wd.progress()
		now = k.now()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.Success {
				return BWReport{}, wcError(&wc, c.Test.Verb.String())
			}
			i := s.qpIndex(wc.QPNum)
			if i < 0 {
				continue
			}
			delta := wc.WRID + 1 - ccnt[i]
			ccnt[i] = wc.WRID + 1
			totC += delta
			if dur {
				if state == stateSample {
					sampled += delta
				}
			} else if totC > 0 {
				t.completed[min(totC, uint64(total))-1] = now
			}
		}
	}
	if dur {
		t.start, t.end = k.sampleFrom, k.sampleTo
		return bwReport(size, int(sampled), t, c.Gbits), nil
	}
	return bwReport(size, total, t, c.Gbits), nil
}

func (s *side) qpIndex(qpn wire.QPN) int {
	for i, qp := range s.qps {
		if qp.QPN() == qpn {
			return i
		}
	}
	return -1
}

// recvState tracks the receive buffers of a SEND test.
type recvState struct {
	wr     [][]verbs.RecvWR
	posted []uint64
}

// postRecvs posts rx_depth receives per QP (ctx_set_recv_wqes).
func (s *side) postRecvs(size int) error {
	c := s.cfg
	rs := &recvState{wr: make([][]verbs.RecvWR, len(s.qps)), posted: make([]uint64, len(s.qps))}
	for i, qp := range s.qps {
		length := size
		if c.Conn == UD {
			length += udGRH
		}
		rs.wr[i] = []verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{s.mr.SGE((len(s.qps)+i)*s.buffSize, length)}}}
		for j := 0; j < c.RxDepth; j++ {
			if err := s.postRecv(rs, i, size); err != nil {
				return fmt.Errorf("%w: post receive on QP %#x: %v", ErrTest, qp.QPN(), err)
			}
		}
	}
	s.recv = rs
	return nil
}

func (s *side) postRecv(rs *recvState, i, size int) error {
	off := 0
	if s.cfg.Test.BW {
		off = s.cycleOffset(rs.posted[i], size)
	}
	if s.cfg.Conn == UD {
		off += s.cacheLine - udGRH // the GRH lands before the cache line
	}
	rs.wr[i][0].SGL[0].Addr = s.mr.Addr() + uint64((len(s.qps)+i)*s.buffSize+off)
	if err := s.qps[i].PostRecv(rs.wr[i]); err != nil {
		return err
	}
	rs.posted[i]++
	return nil
}

// runBWServer is the send_bw server (run_iter_bw_server): it counts
// receives from the first one, reposting buffers until every message of the
// test has one.
func (s *side) runBWServer(ctx context.Context, size int) (BWReport, error) {
	c := s.cfg
	rs := s.recv
	dur := c.Duration > 0
	total := uint64(c.Iters * len(s.qps))
	t := &bwTimes{cqMod: 1, noPeak: true}
	wcs := make([]verbs.WC, 16)
	wd := s.newWatchdog(ctx, "waiting for SEND messages")
	defer wd.stop()
	var k *clock
	var rcnt, sampled uint64
	state := stateWarmup
	for {
		if k != nil && dur {
			state = k.advance(k.now())
			if state == stateEnd {
				break
			}
		} else if !dur && rcnt >= total {
			break
		}
		n := s.rcq.Poll(wcs)
		if n == 0 {
			var err error
			if n, err = wd.await(s.rcq, wcs); err != nil {
				return BWReport{}, err
			}
			if n == 0 {
				continue
			}
		}
		wd.progress()
		if k == nil {
			k = newClock(c.Duration, c.margin)
			t.start = 0
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.Success {
				return BWReport{}, wcError(&wc, "receive")
			}
			i := int(wc.WRID)
			rcnt++
			if dur && state == stateSample {
				sampled++
			}
			if dur || rs.posted[i]+1 <= uint64(c.Iters) {
				if err := s.postRecv(rs, i, size); err != nil {
					return BWReport{}, fmt.Errorf("%w: post receive: %v", ErrTest, err)
				}
			}
		}
	}
	if dur {
		t.start, t.end = k.sampleFrom, k.sampleTo
		return bwReport(size, int(sampled), t, c.Gbits), nil
	}
	t.end = k.now()
	return bwReport(size, int(total), t, c.Gbits), nil
}

// postOne posts wr (one signaled WR) on the first QP; sentOne waits for its
// completion. A latency step does its own bookkeeping between the two,
// while the packets travel: its clock reading (and send_lat's receive
// posted again) is then off the round trip's path.
func (s *side) postOne(wr []verbs.SendWR) error {
	if err := s.qps[0].PostSend(wr); err != nil {
		return fmt.Errorf("%w: post send: %v", ErrTest, err)
	}
	return nil
}

// sentOne waits for the completion of the request postOne posted; what
// names the operation in an error.
func (s *side) sentOne(wc []verbs.WC, wd *watchdog, what string) error {
	if err := pollOne(s.scq, wc, wd); err != nil {
		return err
	}
	if wc[0].Status != verbs.Success {
		return wcError(&wc[0], what)
	}
	return nil
}

// pollOne waits for one completion on cq.
func pollOne(cq *verbs.CQ, wc []verbs.WC, wd *watchdog) error {
	for cq.Poll(wc[:1]) == 0 {
		n, err := wd.await(cq, wc[:1])
		if err != nil {
			return err
		}
		if n > 0 {
			break
		}
	}
	wd.progress()
	return nil
}

// errStop ends a duration-mode latency loop at the end of the test.
var errStop = errors.New("duration over")

// lat is what a latency step gets: mark records the time the current
// iteration's post returned, stop reports the end of a duration-mode run.
type lat struct {
	mark func()
	stop func() bool
}

// latLoop runs iteration or duration bookkeeping for the latency tests;
// step performs one exchange and calls l.mark once its post has returned
// (the gaps between posts are the round trips either way; after it, the
// clock reading is not on the round trip's path).
func (s *side) latLoop(size, rttFactor int, step func(n uint64, l *lat) error) (LatReport, error) {
	c := s.cfg
	if c.Duration == 0 {
		posted := make([]time.Duration, c.Iters)
		k := newClock(0, 0)
		var n int
		l := &lat{mark: func() { posted[n] = k.now() }, stop: func() bool { return false }}
		for n = 0; n < c.Iters; n++ {
			if err := step(uint64(n), l); err != nil {
				return LatReport{}, err
			}
		}
		return latReport(size, posted, rttFactor), nil
	}
	k := newClock(c.Duration, c.margin)
	state := stateWarmup
	var sampled uint64
	l := &lat{mark: func() {}, stop: func() bool { return k.state(k.now()) == stateEnd }}
	for n := uint64(0); ; n++ {
		state = k.advance(k.now())
		if state == stateEnd {
			break
		}
		if err := step(n, l); err != nil {
			if errors.Is(err, errStop) {
				break
			}
			return LatReport{}, err
		}
		if state == stateSample {
			sampled++
		}
	}
	return latDurationReport(size, int(sampled), k.sampleTo-k.sampleFrom, rttFactor), nil
}

// runLatRDMA is the read_lat/atomic_lat client (run_iter_lat): one
// operation at a time, timed from post to post.
func (s *side) runLatRDMA(ctx context.Context, size int) (LatReport, error) {
	wr := []verbs.SendWR{s.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	wc := make([]verbs.WC, 1)
	wd := s.newLatWatchdog(ctx, fmt.Sprintf("waiting for %s completions", s.cfg.Test.Verb))
	defer wd.stop()
	return s.latLoop(size, 1, func(n uint64, l *lat) error {
		wr[0].ID = n
		if err := s.postOne(wr); err != nil {
			return err
		}
		l.mark()
		return s.sentOne(wc, wd, s.cfg.Test.Verb.String())
	})
}

// runLatWrite is write_lat's ping-pong (run_iter_lat_write): each side
// writes its counter into the last byte of the message and waits to see the
// peer's counter arrive in its own buffer. The server writes first.
func (s *side) runLatWrite(ctx context.Context, size int) (LatReport, error) {
	wr := []verbs.SendWR{s.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	postOff := size - 1
	pollOff := len(s.qps)*s.buffSize + size - 1
	wc := make([]verbs.WC, 1)
	wd := s.newLatWatchdog(ctx, "waiting for the peer's RDMA WRITE")
	defer wd.stop()
	if !s.cfg.NoPollReceive {
		wd.poll = s.dev.Poll
	}
	server := s.cfg.IsServer()
	wait := func(want byte, l *lat) error {
		for s.buf[pollOff] != want {
			if l.stop() {
				return errStop
			}
			if err := wd.idle(); err != nil {
				return err
			}
		}
		wd.progress()
		return nil
	}
	var last *lat
	r, err := s.latLoop(size, 2, func(n uint64, l *lat) error {
		last = l
		var stopped error
		if !(n == 0 && server) {
			want := byte(n + 1)
			if server {
				want = byte(n)
			}
			if err := wait(want, l); errors.Is(err, errStop) {
				// Like perftest, write once more when time is up: a peer
				// spinning on its buffer may only notice the end that way.
				stopped = err
			} else if err != nil {
				return err
			}
		}
		s.buf[postOff] = byte(n + 1)
		wr[0].ID = n
		if err := s.postOne(wr); err != nil {
			return err
		}
		l.mark()
		if err := s.sentOne(wc, wd, "RDMA_Write"); err != nil {
			return err
		}
		return stopped
	})
	switch {
	case err != nil:
	case s.cfg.Duration > 0:
		// write_lat has no closing exchange: stay a moment so that the
		// peer's last write is acknowledged before the QP goes away.
		time.Sleep(time.Second)
	case server:
		// The server's last write is answered once more.
		err = wait(byte(s.cfg.Iters), last)
	}
	return r, err
}

// runLatSend is send_lat's ping-pong (run_iter_lat_send): the client sends
// first; each side waits for a message before answering.
func (s *side) runLatSend(ctx context.Context, size int) (LatReport, error) {
	c := s.cfg
	rs := s.recv
	wr := []verbs.SendWR{s.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	wc := make([]verbs.WC, 1)
	wd := s.newLatWatchdog(ctx, "waiting for the peer's SEND")
	defer wd.stop()
	client := !c.IsServer()
	var rcnt uint64
	// The receive a message used is posted again once the answer is
	// posted, while it travels, unless it is the only one (-r 1): the
	// peer's next message could then come before it.
	repost := false
	again := func() error {
		if !repost {
			return nil
		}
		repost = false
		if err := s.postRecv(rs, 0, size); err != nil {
			return fmt.Errorf("%w: post receive: %v", ErrTest, err)
		}
		return nil
	}
	recv := func(l *lat) error {
		for s.rcq.Poll(wc[:1]) == 0 {
			if l.stop() {
				return errStop
			}
			n, err := wd.await(s.rcq, wc[:1])
			if err != nil {
				return err
			}
			if n > 0 {
				break
			}
		}
		wd.progress()
		if wc[0].Status != verbs.Success {
			return wcError(&wc[0], "receive")
		}
		rcnt++
		if c.Duration > 0 || rcnt+uint64(c.RxDepth) <= uint64(c.Iters) {
			repost = true
			if c.RxDepth < 2 {
				return again()
			}
		}
		return nil
	}
	var last *lat
	r, err := s.latLoop(size, 2, func(n uint64, l *lat) error {
		last = l
		if !(n == 0 && client) {
			if err := recv(l); err != nil {
				return err
			}
		}
		wr[0].ID = n
		if err := s.postOne(wr); err != nil {
			return err
		}
		l.mark()
		if err := again(); err != nil {
			return err
		}
		return s.sentOne(wc, wd, "Send")
	})
	if err != nil {
		return r, err
	}
	// The client's last message is answered once more.
	if client && c.Duration == 0 {
		if err := recv(last); err != nil {
			return r, err
		}
	}
	return r, nil
}
