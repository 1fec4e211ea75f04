package sa

// The end-to-end test of softrdma's own SM and SA together, no OpenSM:
// softrdma's fabric served by fabric/ibsim's server, swept by sm.Manager
// with the SA attached (Attach); saquery and ibroute under libumad2sim read
// the subnet while softrdma verbs devices run RC traffic by LID between
// HCAs on different switches. It runs with SOFTRDMA_IBSIM_E2E set.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// rcDev is a verbs device at a CA port of the fabric, with one RC QP.
type rcDev struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
	lid uint16
}

func openRCDev(t *testing.T, f *fabric.Fabric, name string, lid uint16) *rcDev {
	t.Helper()
	p, err := f.ConnectHCA(f.NodeByName(name), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ib.New(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "smsa-" + name})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	h := &rcDev{dev: d, lid: lid}
	if h.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = d.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = h.pd.RegMR(make([]byte, 1<<16), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if h.qp, err = h.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pa, err := d.QueryPort(1)
		if err == nil && pa.State == verbs.PortActive && pa.LID == lid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's port not ACTIVE at LID %d: %+v %v", name, lid, pa, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h
}

// connectRC takes h's QP to RTS toward QPN rqpn at LID dlid.
func (h *rcDev) connect(t *testing.T, rqpn wire.QPN, dlid uint16) {
	t.Helper()
	steps := []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: verbs.MTU1024, DestQPN: rqpn, RQPSN: 7,
			AH: verbs.AHAttr{DLID: dlid, PortNum: 1}, MaxDestRdAtomic: 1, MinRNRTimer: 1},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 7, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := h.qp.Modify(&s.a, s.m); err != nil {
			t.Fatalf("RC to %v: %v", s.a.State, err)
		}
	}
}

// wait polls h's CQ for one completion.
func (h *rcDev) wait(ctx context.Context) (verbs.WC, error) {
	wcs := make([]verbs.WC, 1)
	for h.cq.Poll(wcs) == 0 {
		if ctx.Err() != nil {
			return verbs.WC{}, ctx.Err()
		}
		time.Sleep(50 * time.Microsecond)
	}
	if wcs[0].Status != verbs.Success {
		return wcs[0], fmt.Errorf("completion %v", wcs[0].Status)
	}
	return wcs[0], nil
}

var reIbrouteLFT = regexp.MustCompile(`(?m)^0x([0-9a-f]{4}) (\d{3}) :`)

func TestE2ESMAndSA(t *testing.T) {
	if os.Getenv("SOFTRDMA_IBSIM_E2E") == "" {
		t.Skip("SOFTRDMA_IBSIM_E2E is not set (CI sets it)")
	}
	for _, bin := range []string{"ibsim-run", "saquery", "ibroute"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("SOFTRDMA_IBSIM_E2E is set but %s is not installed", bin)
		}
	}
	fab := openFabric(t, "net.2sw2path4hca")
	sock := fmt.Sprintf("softrdma-smsa-%d", os.Getpid())
	srv, err := ibsim.NewServer(ibsim.FabricBackend(fab), ibsim.Config{SockName: sock,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	defer func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ibsim.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()

	// softrdma's SM and SA at Hca1. saquery under libumad2sim does not
	// acknowledge RMPP segments (see TestE2ESaquery): long RMPP timeout.
	tr, err := sm.FabricTransport(fab, fab.NodeByName("Hca1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Attach(tr, sm.Config{Logger: quietLog(), SweepInterval: 50 * time.Millisecond}, Config{RMPPTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan error, 1)
	go func() { running <- x.Run(ctx) }()
	defer func() {
		cancel()
		<-running
	}()
	deadline := time.Now().Add(10 * time.Second)
	for x.Subnet() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no sweep")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := x.Subnet()

	// RC traffic between Hca3 (Switch1) and Hca4 (Switch2) by LID while
	// the diags read: WRITEs of 8 KiB, each checked, until the diags end.
	lidOf := func(name string) uint16 { return s.PortByGUID(fab.NodeByName(name).PortGUID(1)).LID() }
	a, b := openRCDev(t, fab, "Hca3", lidOf("Hca3")), openRCDev(t, fab, "Hca4", lidOf("Hca4"))
	a.connect(t, b.qp.QPN(), b.lid)
	b.connect(t, a.qp.QPN(), a.lid)
	tctx, tcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes atomic.Int64
	var terr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		const size = 8192
		for i := 0; i < 100000 && tctx.Err() == nil; i++ {
			src, dst := a.mr.Buf()[:size], b.mr.Buf()[:size]
			for j := range src {
				src[j] = byte(i + j*3)
			}
			if err := a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err != nil {
				terr = err
				return
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := a.wait(wctx)
			wcancel()
			if err != nil {
				terr = fmt.Errorf("WRITE %d: %w", i, err)
				return
			}
			if !bytes.Equal(src, dst) {
				terr = fmt.Errorf("WRITE %d: data differs", i)
				return
			}
			writes.Add(1)
		}
	}()

	host := "Hca2"
	for _, p := range endPorts(s) {
		if p.LID() == 0 {
			continue
		}
		lid := strconv.Itoa(int(p.LID()))
		checkNodeRecord(t, p, dumps(runSaquery(t, sock, host, "NodeRecord", lid), "NodeRecord"))
	}
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p == nil || p.LID() == 0 {
				continue
			}
			arg := fmt.Sprintf("%d/%d", p.LID(), p.Num)
			checkPortInfoRecord(t, p, dumps(runSaquery(t, sock, host, "PortInfoRecord", arg), "PortInfoRecord"))
			if p.Remote != nil {
				checkLinkRecord(t, p, dumps(runSaquery(t, sock, host, "LinkRecord", arg), "LinkRecord"))
			}
		}
		if n.Switch == nil {
			continue
		}
		lid := strconv.Itoa(int(n.Ports[0].LID()))
		checkSwitchInfoRecord(t, n, dumps(runSaquery(t, sock, host, "SWIR", lid), "SwitchInfoRecord"))
		// ibroute prints the LFT the SM programmed.
		out := runDiag(t, sock, host, "ibroute", lid)
		got := map[int]int{}
		for _, m := range reIbrouteLFT.FindAllStringSubmatch(out, -1) {
			l, _ := strconv.ParseInt(m[1], 16, 32)
			p, _ := strconv.Atoi(m[2])
			got[int(l)] = p
		}
		for l, port := range n.LFT {
			if port == 0xFF {
				continue
			}
			if g, ok := got[l]; !ok || g != int(port) {
				t.Errorf("ibroute %s: LID %d -> %d (printed: %v), the SM programmed %d", n.Desc, l, g, ok, port)
			}
		}
		if len(got) == 0 {
			t.Errorf("ibroute %s printed no entry:\n%s", n.Desc, out)
		}
	}
	cas := caPorts(s)
	for _, pa := range cas {
		for _, pb := range cas {
			if pa != pb {
				args := []string{"-p", "--slid", strconv.Itoa(int(pa.LID())), "--dlid", strconv.Itoa(int(pb.LID()))}
				checkPathRecord(t, s, pa, pb, dumps(runSaquery(t, sock, host, args...), "PathRecord"))
			}
		}
	}
	during := writes.Load()
	tcancel()
	wg.Wait()
	if terr != nil {
		t.Fatalf("RC traffic: %v", terr)
	}
	if during == 0 {
		t.Error("no RC WRITE completed while the diags read")
	}
	if st := x.SA.Stats(); st.Errors != 0 || st.Requests < 30 {
		t.Errorf("SA stats %+v", st)
	}
	if got := x.Subnet(); got.Sweep != s.Sweep {
		t.Errorf("the subnet was swept again (sweep %d, then %d) while nothing changed", s.Sweep, got.Sweep)
	}
	t.Logf("%d RC WRITEs of 8 KiB Hca3 -> Hca4 while saquery and ibroute ran; SA %+v; SM %+v", during, x.SA.Stats(), x.Stats())
}

// runDiag runs an infiniband-diags tool under ibsim-run at host.
func runDiag(t *testing.T, sock, host, tool string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ibsim-run", append([]string{tool}, args...)...)
	cmd.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock, "SIM_HOST="+host)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
	}
	return string(out)
}
