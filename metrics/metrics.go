// Package metrics exports softrdma devices' counters to Prometheus.
//
// A Collector reads each device's counters (verbs.Device.Counters) when it
// is scraped and reports each as a counter named softrdma_NAME_total,
// labelled with the device and its port:
//
//	softrdma_sent_pkts_total{device="softrdma_eth0",port="1"} 1234
//
// Linux rxe's hardware counters keep rxe's names (sent_pkts, rcvd_pkts,
// duplicate_request, ..., rdma_recvs); softrdma's own follow them. Register
// a Collector with a prometheus.Registry and serve it with promhttp, or use
// Serve.
package metrics

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/softrdma/softrdma/verbs"
)

// Collector is a prometheus.Collector of devices' counters.
type Collector struct {
	mu    sync.Mutex
	devs  []*verbs.Device
	descs map[string]*prometheus.Desc
}

// NewCollector returns a Collector of the devices' counters.
func NewCollector(devs ...*verbs.Device) *Collector {
	return &Collector{devs: devs, descs: map[string]*prometheus.Desc{}}
}

// Add adds a device to those the Collector reports.
func (c *Collector) Add(d *verbs.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.devs = append(c.devs, d)
}

// Remove stops reporting a device (before it is closed, for instance).
func (c *Collector) Remove(d *verbs.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.devs {
		if x == d {
			c.devs = append(c.devs[:i], c.devs[i+1:]...)
			return
		}
	}
}

func (c *Collector) desc(name string) *prometheus.Desc {
	d, ok := c.descs[name]
	if !ok {
		d = prometheus.NewDesc("softrdma_"+name+"_total", help(name), []string{"device", "port"}, nil)
		c.descs[name] = d
	}
	return d
}

// help describes a counter for Prometheus: rxe's counters by what they
// count, softrdma's own by their source.
func help(name string) string {
	if h, ok := rxeHelp[name]; ok {
		return h + " (Linux rxe's " + name + ")."
	}
	return "softrdma's " + name + " counter (see verbs.Device.Counters)."
}

var rxeHelp = map[string]string{
	"sent_pkts":              "Packets sent",
	"rcvd_pkts":              "Packets received and taken by a QP",
	"duplicate_request":      "Request packets the responder saw again",
	"out_of_seq_request":     "Request PSN gaps the responder NAKed",
	"rcvd_rnr_err":           "RNR NAKs received",
	"send_rnr_err":           "RNR NAKs sent",
	"rcvd_seq_err":           "PSN sequence error NAKs received",
	"ack_deferred":           "Responses queued for later handling",
	"retry_exceeded_err":     "Work requests failed with RETRY_EXC_ERR",
	"retry_rnr_exceeded_err": "Work requests failed with RNR_RETRY_EXC_ERR",
	"completer_retry_err":    "ACK timeouts that resent packets",
	"send_err":               "Packets the link failed to send",
	"link_downed":            "Times the port went down",
	"rdma_sends":             "SEND work requests completed",
	"rdma_recvs":             "Receive work requests completed",
}

// Describe sends the descriptions of the counters the Collector's devices
// have now (prometheus.Collector).
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range c.devs {
		for _, k := range d.Counters() {
			if !seen[k.Name] {
				seen[k.Name] = true
				ch <- c.desc(k.Name)
			}
		}
	}
}

// Collect sends every device's counters (prometheus.Collector).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.devs {
		name := d.Name()
		for _, k := range d.Counters() {
			ch <- prometheus.MustNewConstMetric(c.desc(k.Name), prometheus.CounterValue, float64(k.Value), name, "1")
		}
	}
}

// Serve serves the devices' counters at /metrics on addr (host:port; port
// 0 picks one) until ctx ends, in a goroutine of its own. It returns the
// address it listens on and a function that stops the server and waits
// for it.
func Serve(ctx context.Context, addr string, devs ...*verbs.Device) (net.Addr, func(), error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewCollector(devs...)); err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed once stopped
	}()
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	var once sync.Once
	return ln.Addr(), func() {
		once.Do(func() {
			stop()
			srv.Close()
			<-done
		})
	}, nil
}
