package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/verbs"
)

// rxeCounters are Linux rxe's hardware counters, in the order `rdma
// statistic show link` prints them.
var rxeCounters = verbs.RxeCounterNames()

// runStat prints the counters a running tool serves with --metrics, in
// the shape of `rdma statistic show link`.
func runStat(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	all := fs.Bool("a", false, "also print softrdma's own counters after rxe's")
	fs.Usage = usageFunc(fs, "stat [-a] HOST:PORT|URL",
		"Prints the counters of the devices a softrdma tool serves with --metrics HOST:PORT, one line a port,\n"+
			"as 'rdma statistic show link' prints an rxe device's: Linux rxe's counters by rxe's names, in its order.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: need the address the tool serves its counters at", tool.ErrUsage)
	}
	url := pos[0]
	if !strings.Contains(url, "://") {
		url = "http://" + url + "/metrics"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", tool.ErrUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	links, err := parseCounters(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	if len(links) == 0 {
		return fmt.Errorf("%s: no softrdma counters", url)
	}
	for _, l := range links {
		fmt.Fprintf(out, "link %s/%s", l.dev, l.port)
		for _, name := range rxeCounters {
			fmt.Fprintf(out, " %s %d", name, l.values[name])
		}
		if *all {
			for _, name := range l.order {
				if !slices.Contains(rxeCounters, name) {
					fmt.Fprintf(out, " %s %d", name, l.values[name])
				}
			}
		}
		fmt.Fprintln(out)
	}
	return nil
}

// linkCounters are one port's counters.
type linkCounters struct {
	dev, port string
	values    map[string]uint64
	order     []string // names, in the order of their families' names
}

// parseCounters reads the Prometheus text format and returns the
// softrdma_*_total counters by device and port, in the order the devices
// first appear.
func parseCounters(r io.Reader) ([]*linkCounters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var links []*linkCounters
	byKey := map[string]*linkCounters{}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		f := fams[name]
		short, ok := strings.CutPrefix(name, "softrdma_")
		if !ok {
			continue
		}
		short, ok = strings.CutSuffix(short, "_total")
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			var dev, port string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "device":
					dev = lp.GetValue()
				case "port":
					port = lp.GetValue()
				}
			}
			if dev == "" || m.GetCounter() == nil {
				continue
			}
			k := dev + "/" + port
			l := byKey[k]
			if l == nil {
				l = &linkCounters{dev: dev, port: port, values: map[string]uint64{}}
				byKey[k] = l
				links = append(links, l)
			}
			l.values[short] = uint64(m.GetCounter().GetValue())
			l.order = append(l.order, short)
		}
	}
	slices.SortFunc(links, func(a, b *linkCounters) int { return strings.Compare(a.dev+"/"+a.port, b.dev+"/"+b.port) })
	return links, nil
}
