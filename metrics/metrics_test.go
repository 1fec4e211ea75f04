package metrics

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// openPair opens two devices on a loop network and connects an RC QP on
// each; it returns them and a function that moves n 64-byte SENDs a -> b.
func openPair(t *testing.T) (a, b *verbs.Device, send func(n int)) {
	t.Helper()
	n := loop.NewNetwork(loop.Config{})
	la, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.2")}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	a, err = verbs.Open(la, &verbs.Options{Name: "mA"})
	if err != nil {
		t.Fatal(err)
	}
	b, err = verbs.Open(lb, &verbs.Options{Name: "mB"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close(); n.Close() })
	type side struct {
		qp *verbs.QP
		cq *verbs.CQ
		mr *verbs.MR
	}
	mk := func(d *verbs.Device) side {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(64, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return side{qp, cq, mr}
	}
	sa, sb := mk(a), mk(b)
	connect := func(s side, peer side, gid netip.Addr) {
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			AH: verbs.AHAttr{DGID: wire.GIDFromAddr(gid), PortNum: 1}, MinRNRTimer: 1},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
	connect(sa, sb, netip.MustParseAddr("10.0.0.2"))
	connect(sb, sa, netip.MustParseAddr("10.0.0.1"))
	send = func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wc := make([]verbs.WC, 16)
		for range n {
			if err := sb.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{sb.mr.SGE(0, 64)}}}); err != nil {
				t.Fatal(err)
			}
			if err := sa.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{sa.mr.SGE(0, 64)}}}); err != nil {
				t.Fatal(err)
			}
			for _, cq := range []*verbs.CQ{sa.cq, sb.cq} {
				k, err := cq.Wait(ctx, wc[:1])
				if err != nil || k != 1 || wc[0].Status != verbs.Success {
					t.Fatalf("completion %v %v", wc[:k], err)
				}
			}
		}
	}
	return a, b, send
}

// TestCollector: the registry reports every counter of both devices,
// labelled, and the values follow the traffic.
func TestCollector(t *testing.T) {
	a, b, send := openPair(t)
	c := NewCollector(a)
	c.Add(b)
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	send(3)
	want := 2 * len(a.Counters())
	if n, err := testutil.GatherAndCount(reg); err != nil || n != want {
		t.Fatalf("%d metrics (%v), want %d", n, err, want)
	}
	const exp = `
# HELP softrdma_rdma_sends_total SEND work requests completed (Linux rxe's rdma_sends).
# TYPE softrdma_rdma_sends_total counter
softrdma_rdma_sends_total{device="mA",port="1"} 3
softrdma_rdma_sends_total{device="mB",port="1"} 0
# HELP softrdma_rdma_recvs_total Receive work requests completed (Linux rxe's rdma_recvs).
# TYPE softrdma_rdma_recvs_total counter
softrdma_rdma_recvs_total{device="mA",port="1"} 0
softrdma_rdma_recvs_total{device="mB",port="1"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "softrdma_rdma_sends_total", "softrdma_rdma_recvs_total"); err != nil {
		t.Error(err)
	}
	c.Remove(b)
	if n, _ := testutil.GatherAndCount(reg); n != want/2 {
		t.Errorf("after Remove: %d metrics, want %d", n, want/2)
	}
}

// TestServe scrapes /metrics over HTTP and stops the server.
func TestServe(t *testing.T) {
	a, _, send := openPair(t)
	send(2)
	addr, stop, err := Serve(context.Background(), "127.0.0.1:0", a)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`softrdma_rdma_sends_total{device="mA",port="1"} 2`, `softrdma_sent_pkts_total{device="mA",port="1"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	stop()
	if _, err := http.Get("http://" + addr.String() + "/metrics"); err == nil {
		t.Error("the server still answers after stop")
	}
}
