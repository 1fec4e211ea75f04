package main

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestQPScale runs the qpscale case small.
func TestQPScale(t *testing.T) {
	var out bytes.Buffer
	if err := runQPScale([]string{"-n", "200"}, &out); err != nil {
		t.Fatal(err)
	}
	f := fields(out.String())
	if f["qps"] != 200 || f["rts_s"] <= 0 {
		t.Fatalf("figures %q", out.String())
	}
}

// TestCMScale runs the rdma_cm scale case small, both sides in this
// process: every connection moves its SEND, and both report.
func TestCMScale(t *testing.T) {
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port)
	u.Close()
	args := []string{"-n", "20", "-workers", "4", "-roce-port", port, "-port", "7499", "-linger", "300ms"}
	var sout bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- runCMServer(args, &sout) }()
	var cout bytes.Buffer
	if err := runCMClient(args, &cout); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	c, s := fields(cout.String()), fields(sout.String())
	if c["conns"] != 20 || s["conns"] != 20 || c["conn_per_s"] <= 0 || s["disconnected"] != 20 {
		t.Fatalf("client %q, server %q", cout.String(), sout.String())
	}
}

// TestParse reads the figures of softrdma perf's reports.
func TestParse(t *testing.T) {
	bw := ` #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      82755            0.00               1724.06		   0.027585
---------------------------------------------------------------------------------------
 link: sent 821928 packets in 27109 calls (30.3 a call, 26735 GSO sends), received 34411 in 27456 calls (1.3 a call, 0 GRO receives)
 CPU: 3.053 s (user 1.189 s, system 1.864 s), 3.57 us a packet sent or received
`
	r, ok := parseBW(bw)
	if !ok || r.mbs != 1724.06 || r.mpps != 0.027585 || r.usPerPkt != 3.57 || r.cpuSec != 3.053 || r.pkts != 821928 || r.calls != 27109 {
		t.Fatalf("%+v %v", r, ok)
	}
	lat := ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      20000          17.87          1189.13      60.16    	       63.36       	25.63  		135.85  		270.83 
`
	m := reLat.FindStringSubmatch(lat)
	if m == nil || m[3] != "60.16" || m[6] != "135.85" || m[7] != "270.83" {
		t.Fatalf("%q", m)
	}
	if _, ok := parseBW("no report"); ok {
		t.Fatal("a report parsed out of nothing")
	}
	f := fields("mode=gsogro rx_pps=1370974 rx_payload_GB/s=5.616 tx_cpu_us/pkt=0.44(usr 0.06)")
	if f["rx_payload_GB/s"] != 5.616 || f["tx_cpu_us/pkt"] != 0.44 || f["rx_pps"] != 1370974 {
		t.Fatalf("%v", f)
	}
	var w strings.Builder
	b := &bench{}
	b.row("a", "1", "2", "50%")
	b.print(&w, 0)
	if !strings.Contains(w.String(), "| a | 1 | 2 | 50% |") {
		t.Fatalf("%s", w.String())
	}
}

// BenchmarkQPScale creates 20,000 QPs and brings them to RTS per op.
func BenchmarkQPScale(b *testing.B) {
	for range b.N {
		if err := runQPScale([]string{"-n", "20000"}, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMedian: odd and even counts, unsorted input left as it was.
func TestMedian(t *testing.T) {
	x := []float64{3, 1, 2}
	if m := median(x); m != 2 || x[0] != 3 {
		t.Errorf("median(3 1 2) = %v (input now %v)", m, x)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median(4 1 3 2) = %v, want 2.5", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("median() = %v", m)
	}
}

// TestSpread pins the paired rows' formats.
func TestSpread(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{spread([]float64{3.19, 3.01, 3.16}, 2, " GB/s"), "median 3.16 GB/s (3.01-3.19)"},
		{spread([]float64{1.9011, 1.936, 1.917}, 3, " M msg/s"), "median 1.917 M msg/s (1.901-1.936)"},
		{pctSpread([]float64{0.61, 0.65, 0.64}, "UDP"), "median 64% of UDP (pairs 61-65%)"},
		{pctSpread([]float64{0.83}, "1 QP"), "median 83% of 1 QP (pairs 83-83%)"},
		{timesSpread([]float64{1.79, 1.81, 1.80}), "median 1.80x (pairs 1.79-1.81x)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
