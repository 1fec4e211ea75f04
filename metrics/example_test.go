package metrics_test

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/metrics"
	"github.com/softrdma/softrdma/verbs"
)

// A program registers a Collector of its devices with its Prometheus
// registry (here a registry of its own; prometheus.MustRegister uses the
// default one that promhttp.Handler serves).
func Example() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	l, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		panic(err)
	}
	dev, err := verbs.Open(l, &verbs.Options{Name: "example0"})
	if err != nil {
		panic(err)
	}
	defer dev.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(dev))
	fams, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range fams {
		if f.GetName() == "softrdma_rdma_sends_total" {
			m := f.GetMetric()[0]
			fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
	}
	// Output: softrdma_rdma_sends_total example0 0
}
