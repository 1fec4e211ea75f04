package main

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
)

// TestStat opens a device as the tools do with --metrics and reads its
// counters back with stat: rxe's fifteen, in rxe's order, and with -a
// softrdma's own; after the device closes, nothing serves them.
func TestStat(t *testing.T) {
	port, _ := strconv.Atoi(freeUDPPort(t))
	f := tool.Flags{RoCEPort: uint(port), BusyPoll: true, Metrics: "127.0.0.1:0"}
	d, err := f.OpenAddrs([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil, "softrdma_stattest", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := d.MetricsAddr.String()
	var out bytes.Buffer
	if err := runStat(context.Background(), []string{addr}, &out); err != nil {
		d.Close()
		t.Fatal(err)
	}
	want := "link softrdma_stattest/1 sent_pkts 0 rcvd_pkts 0 duplicate_request 0 out_of_seq_request 0 rcvd_rnr_err 0 " +
		"send_rnr_err 0 rcvd_seq_err 0 ack_deferred 0 retry_exceeded_err 0 retry_rnr_exceeded_err 0 completer_retry_err 0 " +
		"send_err 0 link_downed 0 rdma_sends 0 rdma_recvs 0\n"
	if out.String() != want {
		t.Errorf("stat:\n%q\nwant\n%q", out.String(), want)
	}
	out.Reset()
	if err := runStat(context.Background(), []string{"-a", "http://" + addr + "/metrics"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), strings.TrimSuffix(want, "\n")) || !strings.Contains(out.String(), " link_tx_packets 0") {
		t.Errorf("stat -a:\n%s", out.String())
	}
	d.Close()
	if err := runStat(context.Background(), []string{addr}, &out); err == nil {
		t.Error("stat of a closed device's address: no error")
	}
	if err := runStat(context.Background(), nil, &out); !errors.Is(err, tool.ErrUsage) {
		t.Errorf("stat without an address: %v", err)
	}
}

// TestParseCounters reads several devices' counters from the text format,
// skipping what is not softrdma's.
func TestParseCounters(t *testing.T) {
	in := `# TYPE go_goroutines gauge
go_goroutines 7
# TYPE softrdma_rdma_sends_total counter
softrdma_rdma_sends_total{device="b",port="1"} 5
softrdma_rdma_sends_total{device="a",port="1"} 12345678901
# TYPE softrdma_link_tx_packets_total counter
softrdma_link_tx_packets_total{device="a",port="1"} 9
`
	links, err := parseCounters(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 || links[0].dev != "a" || links[1].dev != "b" {
		t.Fatalf("links %+v", links)
	}
	if links[0].values["rdma_sends"] != 12345678901 || links[0].values["link_tx_packets"] != 9 || links[1].values["rdma_sends"] != 5 {
		t.Errorf("values %v %v", links[0].values, links[1].values)
	}
	if _, err := parseCounters(strings.NewReader("softrdma_x_total{ 1\n")); err == nil {
		t.Error("malformed input: no error")
	}
}

// FuzzParseCounters: any input gives counters or an error, never a panic,
// and every link it returns has a device.
func FuzzParseCounters(f *testing.F) {
	f.Add("# TYPE softrdma_rdma_sends_total counter\nsoftrdma_rdma_sends_total{device=\"a\",port=\"1\"} 5\n")
	f.Add("softrdma_sent_pkts_total{device=\"x\"} 1e3\nsoftrdma_sent_pkts_total{device=\"x\"} 2\n")
	f.Add("# TYPE softrdma_a_total gauge\nsoftrdma_a_total{device=\"d\",port=\"1\"} -1\n")
	f.Fuzz(func(t *testing.T, in string) {
		links, err := parseCounters(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, l := range links {
			if l.dev == "" {
				t.Fatalf("a link without a device: %+v", l)
			}
		}
	})
}
