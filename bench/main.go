// Command bench measures softrdma against the raw transports of the machine
// it runs on and prints a table of figures and ratios (docs/PERFORMANCE.md
// holds one). Every softrdma case runs as two processes on loopback (the
// server bound to 127.0.0.2, the client to 127.0.0.1), beside the raw
// references from ../shared/bench measured in the same run, so that the
// ratios hold on a noisy machine where absolute numbers do not:
//
//	go run ./bench                      # everything, about 3 minutes
//	go run ./bench -only lat,rate       # some sections: bw, rate, lat, scale
//	go run ./bench -shared DIR -d 5s    # the references' directory; seconds per bandwidth case
//
// The figures are reported, never judged: nothing here passes or fails on a
// number. Raise the socket buffer limits for the UDP references
// (sysctl net.core.rmem_max=67108864 net.core.wmem_max=67108864).
//
// Internal subcommands, run by the table's cases: "qpscale" (QPs created
// and brought to RTS on one device), "cm-server" and "cm-client" (rdma_cm
// connections between two processes, each moving a SEND), "udpfloor" (a
// UDP ping-pong making the system calls of softrdma's polling round trip
// and nothing else: the kernel's share of it, see floor_linux.go). With
// SOFTRDMA_CPUPROFILE=FILE in its environment, a subcommand writes a CPU
// profile to FILE.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		stop, err := startProfile()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		switch os.Args[1] {
		case "qpscale":
			err = runQPScale(os.Args[2:], os.Stdout)
		case "cm-server":
			err = runCMServer(os.Args[2:], os.Stdout)
		case "cm-client":
			err = runCMClient(os.Args[2:], os.Stdout)
		case "udpfloor":
			err = runFloor(os.Args[2:], os.Stdout)
		default:
			err = runTable(os.Args[1:], os.Stdout)
		}
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := runTable(nil, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench is one run of the table: the built programs and the rows so far.
type bench struct {
	dir      string // built programs
	dur      time.Duration
	rows     [][4]string // case, softrdma, reference, ratio
	notes    []string
	verbose  bool
	tcpPort  int
	scaleQPs int
	cmConns  int
	pin      bool // -pin: pairs' servers on CPU 1, clients on CPU 0
	pairs    int  // -pairs: alternated UDP/WRITE pairs for the P1 ratios
}

func runTable(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	shared := fs.String("shared", "../shared/bench", "directory of the raw reference programs (cmd/udpbw, cmd/tcpbw, cmd/pingpong)")
	dur := fs.Duration("d", 3*time.Second, "duration of each bandwidth case")
	only := fs.String("only", "bw,rate,lat,scale", "sections to run: bw, rate, lat, scale")
	verbose := fs.Bool("v", false, "print each command and its output")
	qps := fs.Int("qps", 65536, "QPs for the max_qp case")
	conns := fs.Int("conns", 10000, "rdma_cm connections for the scale case")
	pin := fs.Bool("pin", canPin() && numCPU() >= 2, "confine each server to CPU 1 and each client to CPU 0, as udpbw confines its receiver and sender (Linux, 2 CPUs or more)")
	pairs := fs.Int("pairs", 4, "run UDP GSO+GRO and RC WRITE (64 KiB, 1 MiB), UDP and the 64 B message rate, the raw and softrdma round trips (polling, sleeping), and 1 and 1,000 QPs' aggregate, alternately this many times and report the median of their ratios (0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "softrdma-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{dir: dir, dur: *dur, verbose: *verbose, tcpPort: 18700, scaleQPs: *qps, cmConns: *conns, pin: *pin, pairs: *pairs}
	fmt.Fprintln(out, "building...")
	if err := b.build(".", "./cmd/softrdma", "softrdma"); err != nil {
		return err
	}
	if err := b.build(".", "./bench", "bench"); err != nil {
		return err
	}
	for _, c := range []string{"udpbw", "tcpbw", "pingpong"} {
		if err := b.build(*shared, "./cmd/"+c, c); err != nil {
			return fmt.Errorf("%w (the raw references come from -shared %s)", err, *shared)
		}
	}
	secs := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		secs[strings.TrimSpace(s)] = true
	}
	start := time.Now()
	if secs["bw"] {
		b.bandwidth()
		b.pairedRatios()
	}
	if secs["rate"] {
		b.rate()
		b.pairedRate()
	}
	if secs["lat"] {
		b.latency()
		b.pairedLatency()
	}
	if secs["scale"] {
		b.scale()
	}
	b.print(out, time.Since(start))
	return nil
}

// build compiles pkg in dir into the program name.
func (b *bench) build(dir, pkg, name string) error {
	cmd := exec.Command("go", "build", "-o", filepath.Join(b.dir, name), pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %v\n%s", pkg, dir, err, out)
	}
	return nil
}

// run runs program name with args and returns its combined output.
func (b *bench) run(timeout time.Duration, name string, args ...string) (string, error) {
	return b.runOn(-1, timeout, name, args...)
}

// cpu returns the CPU a pair's client (0) or server (1) runs on: that one
// if pinned, otherwise -1 (any).
func cpu(pinned bool, n int) int {
	if !pinned {
		return -1
	}
	return n
}

// runOn runs program name with args on CPU cpu (any if cpu < 0) and
// returns its combined output.
func (b *bench) runOn(cpu int, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.dir, name), args...)
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := startOn(cmd, cpu)
	if err == nil {
		err = cmd.Wait()
	}
	out := buf.String()
	if b.verbose {
		fmt.Fprintf(os.Stderr, "$ %s %s\n%s", name, strings.Join(args, " "), out)
	}
	return out, err
}

// pair runs a server and a client of program name as two processes: the
// server with sargs, the client, once the server is up, with cargs; with
// -pin, the server on CPU 1 and the client on CPU 0. It returns both
// outputs.
func (b *bench) pair(timeout time.Duration, name string, sargs, cargs []string) (server, client string, err error) {
	return b.pairOn(b.pin, timeout, name, sargs, cargs, false)
}

// rawPair is pair for a raw reference whose server runs until it is
// killed (pingpong): the server is killed once the client has ended, and
// the error is the client's.
func (b *bench) rawPair(name string, sargs, cargs []string) (client string, err error) {
	_, client, err = b.pairOn(b.pin, time.Minute, name, sargs, cargs, true)
	return client, err
}

// pairOn is pair, pinned or not; with stop, the server is killed when the
// client has ended.
func (b *bench) pairOn(pinned bool, timeout time.Duration, name string, sargs, cargs []string, stop bool) (server, client string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	srv := exec.CommandContext(ctx, filepath.Join(b.dir, name), sargs...)
	var sout strings.Builder
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := startOn(srv, cpu(pinned, 1)); err != nil {
		return "", "", err
	}
	time.Sleep(300 * time.Millisecond)
	client, cerr := b.runOn(cpu(pinned, 0), timeout, name, cargs...)
	if stop {
		cancel() // kills the server
	}
	werr := srv.Wait()
	if stop {
		werr = nil
	}
	if b.verbose {
		fmt.Fprintf(os.Stderr, "$ %s %s (server)\n%s", name, strings.Join(sargs, " "), sout.String())
	}
	if cerr == nil {
		cerr = werr
	}
	return sout.String(), client, cerr
}

// perf runs "softrdma perf TEST" as a server/client pair with the shared
// flags and --stats, and returns both outputs.
func (b *bench) perf(test string, flags ...string) (server, client string, err error) {
	return b.perfOn(b.pin, test, flags...)
}

// perfOn is perf, pinned or not.
func (b *bench) perfOn(pinned bool, test string, flags ...string) (server, client string, err error) {
	b.tcpPort++
	common := append([]string{"perf", test, "-p", strconv.Itoa(b.tcpPort), "--stats", "--progress=false"}, flags...)
	sargs := append(append([]string{}, common...), "--bind", "127.0.0.2")
	cargs := append(append([]string{}, common...), "--bind", "127.0.0.1", "127.0.0.2")
	return b.pairOn(pinned, 2*time.Minute, "softrdma", sargs, cargs, false)
}

// bwRow is one perftest bandwidth report row and the --stats lines.
type bwRow struct {
	mbs, mpps   float64
	usPerPkt    float64 // CPU per packet sent or received
	cpuSec      float64
	pkts, calls float64 // packets sent and send calls (client)
}

var (
	reBW    = regexp.MustCompile(`(?m)^\s*\d+\s+\d+\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+)\s*$`)
	reLat   = regexp.MustCompile(`(?m)^\s*\d+\s+\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)
	reCPU   = regexp.MustCompile(`CPU: ([0-9.]+) s .*, ([0-9.]+) us a packet`)
	reLink  = regexp.MustCompile(`link: sent (\d+) packets in (\d+) calls`)
	reField = regexp.MustCompile(`([A-Za-z_/0-9.]+)=([0-9.]+)`)
)

func parseBW(out string) (bwRow, bool) {
	var r bwRow
	m := reBW.FindStringSubmatch(out)
	if m == nil {
		return r, false
	}
	r.mbs, _ = strconv.ParseFloat(m[1], 64)
	r.mpps, _ = strconv.ParseFloat(m[2], 64)
	if c := reCPU.FindStringSubmatch(out); c != nil {
		r.cpuSec, _ = strconv.ParseFloat(c[1], 64)
		r.usPerPkt, _ = strconv.ParseFloat(c[2], 64)
	}
	if l := reLink.FindStringSubmatch(out); l != nil {
		r.pkts, _ = strconv.ParseFloat(l[1], 64)
		r.calls, _ = strconv.ParseFloat(l[2], 64)
	}
	return r, true
}

// fields parses key=value figures.
func fields(out string) map[string]float64 {
	f := map[string]float64{}
	for _, m := range reField.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err == nil {
			f[m[1]] = v
		}
	}
	return f
}

func (b *bench) row(name, soft, ref, ratio string) {
	b.rows = append(b.rows, [4]string{name, soft, ref, ratio})
}

func (b *bench) fail(name string, err error, out string) {
	line := strings.TrimSpace(out)
	if i := strings.LastIndex(line, "\n"); i >= 0 {
		line = line[i+1:]
	}
	b.row(name, "failed: "+line, "", "")
	b.notes = append(b.notes, fmt.Sprintf("%s: %v", name, err))
}

func pct(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

func times(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// bandwidth: RC WRITE 64 KiB and 1 MiB, READ and SEND 64 KiB, against UDP
// GSO+GRO and TCP; CPU per packet against the raw UDP cost.
func (b *bench) bandwidth() {
	d := strconv.Itoa(max(int(b.dur.Seconds()), 1))
	pin := "-pin=" + strconv.FormatBool(b.pin)
	uout, err := b.run(time.Minute, "udpbw", "-mode", "gsogro", "-d", b.dur.String(), pin)
	u := fields(uout)
	if err != nil || u["rx_payload_GB/s"] == 0 {
		b.fail("UDP GSO+GRO reference", err, uout)
	}
	// A 64 KiB WRITE is 16 packets, the first 16 bytes longer (its RETH):
	// two GSO sends, of 1 and 15 packets, 8 on average.
	u8out, err := b.run(time.Minute, "udpbw", "-mode", "gsogro", "-segs", "8", "-d", b.dur.String(), pin)
	u8 := fields(u8out)["rx_payload_GB/s"]
	if err != nil || u8 == 0 {
		b.fail("UDP GSO+GRO 8-segment reference", err, u8out)
	}
	tout, err := b.run(time.Minute, "tcpbw", "-d", b.dur.String(), pin)
	tcp := fields(tout)["GB/s"]
	if err != nil || tcp == 0 {
		b.fail("TCP reference", err, tout)
	}
	udp := u["rx_payload_GB/s"]
	b.row("UDP GSO+GRO, 4 KiB datagrams (udpbw -mode gsogro)", "", fmt.Sprintf("%.2f GB/s", udp), "")
	b.row("UDP GSO+GRO, 8 datagrams a send (udpbw -mode gsogro -segs 8)", "", fmt.Sprintf("%.2f GB/s", u8), "")
	b.row("TCP stream, 64 KiB writes (tcpbw)", "", fmt.Sprintf("%.2f GB/s", tcp), "")
	var write64 float64
	for _, c := range []struct {
		name, test, size string
		qps              string
		unpinned         bool // the same case with the processes free, for comparison
	}{
		{"RC WRITE 64 KiB, 1 QP", "write_bw", "65536", "1", false},
		{"RC WRITE 1 MiB, 1 QP", "write_bw", "1048576", "1", false},
		{"RC READ 64 KiB, 1 QP", "read_bw", "65536", "1", false},
		{"RC SEND 64 KiB, 1 QP", "send_bw", "65536", "1", false},
		{"RC WRITE 64 KiB, 8 QPs", "write_bw", "65536", "8", false},
		{"RC WRITE 64 KiB, 1 QP, processes not pinned", "write_bw", "65536", "1", true},
	} {
		if c.unpinned && !b.pin {
			continue // every row is unpinned already
		}
		sout, cout, err := b.perfOn(b.pin && !c.unpinned, c.test, "-s", c.size, "-m", "4096", "-D", d, "-q", c.qps)
		r, ok := parseBW(cout)
		if err != nil || !ok {
			b.fail(c.name, err, cout+sout)
			continue
		}
		gbs := r.mbs / 1000
		ratio := pct(gbs, udp) + " of UDP, " + times(gbs, tcp) + " TCP"
		if c.size == "65536" && write64 == 0 {
			write64 = gbs
			ratio += ", " + pct(gbs, u8) + " of UDP at 8 a send"
		} else if c.size == "65536" && write64 > 0 {
			ratio += ", " + pct(gbs, write64) + " of WRITE"
		}
		b.row(c.name, fmt.Sprintf("%.2f GB/s", gbs), "", ratio)
		if c.test == "write_bw" && c.qps == "1" {
			s, _ := parseBW(sout)
			b.row("  CPU per packet, client / server ("+c.name+")",
				fmt.Sprintf("%.2f / %.2f us", r.usPerPkt, s.usPerPkt),
				fmt.Sprintf("%.2f / %.2f us (UDP tx / rx)", u["tx_cpu_us/pkt"], u["rx_cpu_us/pkt"]),
				times(r.usPerPkt+s.usPerPkt, u["tx_cpu_us/pkt"]+u["rx_cpu_us/pkt"]))
			if gbs > 0 {
				b.row("  CPU per GB, client + server ("+c.name+")",
					fmt.Sprintf("%.2f s", (r.cpuSec+s.cpuSec)/(gbs*b.dur.Seconds())), "", "")
			}
			if r.calls > 0 {
				b.row("  packets per send call, client ("+c.name+")", fmt.Sprintf("%.1f", r.pkts/r.calls), "", "")
			}
		}
	}
}

// pairedRatios runs the UDP GSO+GRO reference and RC WRITE of each size
// alternately, b.pairs times, and reports the median and range of the
// ratios of the pairs: on a machine whose speed moves from minute to
// minute, a ratio taken from runs minutes apart says more about the
// machine than about softrdma.
func (b *bench) pairedRatios() {
	if b.pairs <= 0 {
		return
	}
	d := strconv.Itoa(max(int(b.dur.Seconds()), 1))
	pin := "-pin=" + strconv.FormatBool(b.pin)
	for _, c := range []struct{ name, size string }{{"64 KiB", "65536"}, {"1 MiB", "1048576"}} {
		name := fmt.Sprintf("RC WRITE %s, 1 QP, and UDP GSO+GRO, %d pairs run alternately", c.name, b.pairs)
		var ratios, writes, udps []float64
		for range b.pairs {
			uout, err := b.run(time.Minute, "udpbw", "-mode", "gsogro", "-d", b.dur.String(), pin)
			udp := fields(uout)["rx_payload_GB/s"]
			if err != nil || udp == 0 {
				b.fail(name, err, uout)
				break
			}
			sout, cout, err := b.perfOn(b.pin, "write_bw", "-s", c.size, "-m", "4096", "-D", d, "-q", "1")
			r, ok := parseBW(cout)
			if err != nil || !ok {
				b.fail(name, err, cout+sout)
				break
			}
			ratios = append(ratios, r.mbs/1000/udp)
			writes = append(writes, r.mbs/1000)
			udps = append(udps, udp)
		}
		if len(ratios) < b.pairs {
			continue
		}
		b.row(name, spread(writes, 2, " GB/s"), spread(udps, 2, " GB/s"), pctSpread(ratios, "UDP"))
	}
}

// pairedRate runs the 110-byte UDP GSO+GRO reference and the 64-byte WRITE
// message rate at perftest's defaults (1 QP) alternately, b.pairs times,
// for P3: the rate in minutes whose reference is measured beside it.
func (b *bench) pairedRate() {
	if b.pairs <= 0 {
		return
	}
	d := strconv.Itoa(max(int(b.dur.Seconds()), 1))
	name := fmt.Sprintf("RC WRITE 64 B message rate, 1 QP, and UDP GSO+GRO 110-byte, %d pairs run alternately", b.pairs)
	var ratios, rates, udps []float64
	for range b.pairs {
		uout, err := b.run(time.Minute, "udpbw", "-mode", "gsogro", "-size", "110", "-d", b.dur.String(), "-pin="+strconv.FormatBool(b.pin))
		udp := fields(uout)["rx_pps"] / 1e6
		if err != nil || udp == 0 {
			b.fail(name, err, uout)
			return
		}
		sout, cout, err := b.perf("write_bw", "-s", "64", "-D", d, "-q", "1")
		r, ok := parseBW(cout)
		if err != nil || !ok {
			b.fail(name, err, cout+sout)
			return
		}
		ratios = append(ratios, r.mpps/udp)
		rates = append(rates, r.mpps)
		udps = append(udps, udp)
	}
	b.row(name, spread(rates, 3, " M msg/s"), spread(udps, 2, " M pkt/s"), pctSpread(ratios, "UDP"))
}

// spread formats the figures of alternated pairs: their median with prec
// decimals and unit, then their range ("median 3.16 GB/s (3.01-3.19)").
func spread(x []float64, prec int, unit string) string {
	return fmt.Sprintf("median %.*f%s (%.*f-%.*f)", prec, median(x), unit, prec, slices.Min(x), prec, slices.Max(x))
}

// pctSpread formats ratios as percentages of what
// ("median 64% of UDP (pairs 61-65%)").
func pctSpread(r []float64, what string) string {
	return fmt.Sprintf("median %.0f%% of %s (pairs %.0f-%.0f%%)", 100*median(r), what, 100*slices.Min(r), 100*slices.Max(r))
}

// timesSpread formats ratios as factors ("median 1.80x (pairs 1.79-1.81x)").
func timesSpread(r []float64) string {
	return fmt.Sprintf("median %.2fx (pairs %.2f-%.2fx)", median(r), slices.Min(r), slices.Max(r))
}

// median returns the median of x (the mean of the middle two if even).
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// rate: 64-byte WRITE message rate with 1 and 8 QPs, against UDP GSO+GRO
// with 110-byte datagrams (a 64-byte WRITE's size on the wire, UDP payload).
func (b *bench) rate() {
	d := strconv.Itoa(max(int(b.dur.Seconds()), 1))
	uout, err := b.run(time.Minute, "udpbw", "-mode", "gsogro", "-size", "110", "-d", b.dur.String(), "-pin="+strconv.FormatBool(b.pin))
	pps := fields(uout)["rx_pps"] / 1e6
	if err != nil || pps == 0 {
		b.fail("UDP GSO+GRO 110-byte reference", err, uout)
	}
	b.row("UDP GSO+GRO, 110-byte datagrams (udpbw -mode gsogro -size 110)", "", fmt.Sprintf("%.2f M pkt/s", pps), "")
	// perftest's defaults (128 deep, a completion every 100) let at most
	// 28 messages stay in flight while the client waits for a completion,
	// which needs the ACK round trip of two processes (about ten
	// microseconds here, against one or two on a NIC). The deeper queue
	// keeps both sides busy; its row is the rate a program that keeps
	// enough in flight gets.
	for _, c := range []struct{ q, t string }{{"1", ""}, {"8", ""}, {"1", "512"}} {
		name := "RC WRITE 64 B message rate, " + c.q + " QP"
		flags := []string{"-s", "64", "-D", d, "-q", c.q}
		if c.t != "" {
			name += ", " + c.t + " deep (-t " + c.t + ")"
			flags = append(flags, "-t", c.t)
		}
		_, cout, err := b.perf("write_bw", flags...)
		r, ok := parseBW(cout)
		if err != nil || !ok {
			b.fail(name, err, cout)
			continue
		}
		b.row(name, fmt.Sprintf("%.3f M msg/s", r.mpps), "", pct(r.mpps, pps)+" of UDP")
		if r.calls > 0 {
			b.row("  packets per send call, client ("+name+")", fmt.Sprintf("%.1f", r.pkts/r.calls), "", "")
		}
	}
}

// latency: 64-byte WRITE and SEND round trips, against UDP round trips
// blocking and spinning (median, p99, p99.9): perftest's polling loops
// (which receive on the polling goroutine) against spinning; sleeping in
// CQ.Wait (-e, SEND only) and polling that leaves receiving to the link's
// reader (--busy-poll=false) against blocking.
func (b *bench) latency() {
	ref := map[string][3]float64{}
	for i, mode := range []string{"block", "spin"} {
		port := strconv.Itoa(19100 + i)
		cout, err := b.rawPair("pingpong", []string{"-server", "-proto", "udp", "-mode", mode, "-port", port},
			[]string{"-proto", "udp", "-mode", mode, "-port", port, "-size", "64", "-n", "20000"})
		f := fields(cout)
		if f["p50"] == 0 {
			b.fail("UDP round trip, "+mode, err, cout)
			continue
		}
		ref[mode] = [3]float64{f["p50"], f["p99"], f["p99.9"]}
		b.row("UDP 64 B round trip, "+mode+" (pingpong -mode "+mode+")", "",
			fmt.Sprintf("%.1f / %.1f / %.1f us", f["p50"], f["p99"], f["p99.9"]), "")
	}
	floor, err := b.floor("-connect")
	if err != nil {
		b.fail("UDP 64 B round trip, spin, softrdma's system calls", err, "")
	} else {
		b.row("UDP 64 B round trip, spin, softrdma's system calls (bench udpfloor -connect: a 96+20-byte GSO pair by sendmsg from a connected socket, recvmsg with GRO)", "",
			fmt.Sprintf("%.1f / %.1f / %.1f us", floor[0], floor[1], floor[2]), times(floor[0], ref["spin"][0])+" UDP spin median")
	}
	if unc, err := b.floor(); err != nil {
		b.fail("UDP 64 B round trip, spin, softrdma's system calls, unconnected", err, "")
	} else {
		b.row("  the same from an unconnected socket (bench udpfloor: a route lookup a send)", "",
			fmt.Sprintf("%.1f / %.1f / %.1f us", unc[0], unc[1], unc[2]), times(unc[0], ref["spin"][0])+" UDP spin median")
	}
	for _, test := range []string{"write_lat", "send_lat"} {
		// default: perftest's loop, polling the CQ (or memory) and yielding;
		// -e: sleeping in CQ.Wait (not write_lat: it waits on memory).
		for _, mode := range []string{"default", "-e", "--busy-poll=false"} {
			if mode == "-e" && test == "write_lat" {
				continue
			}
			flags := []string{"-s", "64", "-n", "20000"}
			name, against := "RC "+strings.ToUpper(strings.TrimSuffix(test, "_lat"))+" 64 B round trip, "+mode, "block"
			if mode != "default" {
				flags = append(flags, mode)
			} else {
				name, against = name+" (polling)", "spin"
			}
			// Polls that leave receiving to the reader starve it in a
			// process confined to one CPU (Go's network poller waits for
			// sysmon, 10 ms a packet): that mode runs unpinned.
			pinned := b.pin && mode != "--busy-poll=false"
			if b.pin && !pinned {
				name += ", not pinned"
			}
			_, cout, err := b.perfOn(pinned, test, flags...)
			m := reLat.FindStringSubmatch(cout)
			if err != nil || m == nil {
				b.fail(name, err, cout)
				continue
			}
			// perftest reports half round trips: typical, then the 99th
			// and 99.9th percentiles.
			typ, _ := strconv.ParseFloat(m[3], 64)
			p99, _ := strconv.ParseFloat(m[6], 64)
			p999, _ := strconv.ParseFloat(m[7], 64)
			r := ref[against]
			ratio := times(2*typ, r[0]) + " UDP " + against + " median"
			if against == "spin" && floor[0] > 0 {
				ratio += ", " + times(2*typ, floor[0]) + " the floor's"
			}
			b.row(name+" (median / p99 / p99.9)", fmt.Sprintf("%.1f / %.1f / %.1f us", 2*typ, 2*p99, 2*p999), "",
				ratio+"; p99 "+times(p99, typ)+" the median")
		}
	}
}

// floor runs the udpfloor ping-pong (floor_linux.go) as two processes and
// returns its median, p99 and p99.9 round trips in microseconds.
func (b *bench) floor(extra ...string) ([3]float64, error) {
	_, cout, err := b.pair(time.Minute, "bench",
		append([]string{"udpfloor", "-server", "-bind", "127.0.0.2:19120", "-peer", "127.0.0.1:19120"}, extra...),
		append([]string{"udpfloor", "-bind", "127.0.0.1:19120", "-peer", "127.0.0.2:19120", "-n", "20000"}, extra...))
	f := fields(cout)
	if err != nil || f["p50"] == 0 {
		if err == nil {
			err = fmt.Errorf("no figures in %q", cout)
		}
		return [3]float64{}, err
	}
	return [3]float64{f["p50"], f["p99"], f["p99.9"]}, nil
}

// pairedLatency runs the raw round trip and softrdma's alternately,
// b.pairs times, for the P2 comparisons (busy polling: write_lat and
// send_lat against UDP spin; sleeping: send_lat -e against UDP block), and reports
// the median and range of the ratios of the pairs' medians.
func (b *bench) pairedLatency() {
	if b.pairs <= 0 {
		return
	}
	for i, c := range []struct{ name, raw, test, mode string }{
		{"RC WRITE 64 B round trip, polling, and UDP spin", "spin", "write_lat", ""},
		{"RC SEND 64 B round trip, polling, and UDP spin", "spin", "send_lat", ""},
		{"RC SEND 64 B round trip, -e, and UDP block", "block", "send_lat", "-e"},
	} {
		name := fmt.Sprintf("%s, %d pairs run alternately", c.name, b.pairs)
		var ratios, softs, raws, floors, overFloor []float64
		for range b.pairs {
			// The spinning pairs take the floor too (between the raw
			// reference and softrdma), for softrdma's ratio to it.
			var fl float64
			if c.raw == "spin" {
				f, err := b.floor("-connect")
				if err != nil {
					b.fail(name+", the floor", err, "")
					break
				}
				fl = f[0]
			}
			port := strconv.Itoa(19110 + i)
			rout, err := b.rawPair("pingpong", []string{"-server", "-proto", "udp", "-mode", c.raw, "-port", port},
				[]string{"-proto", "udp", "-mode", c.raw, "-port", port, "-size", "64", "-n", "20000"})
			raw := fields(rout)["p50"]
			if raw == 0 {
				b.fail(name, err, rout)
				break
			}
			flags := []string{"-s", "64", "-n", "20000"}
			if c.mode != "" {
				flags = append(flags, c.mode)
			}
			_, cout, err := b.perfOn(b.pin, c.test, flags...)
			m := reLat.FindStringSubmatch(cout)
			if err != nil || m == nil {
				b.fail(name, err, cout)
				break
			}
			typ, _ := strconv.ParseFloat(m[3], 64)
			ratios = append(ratios, 2*typ/raw)
			softs = append(softs, 2*typ)
			raws = append(raws, raw)
			if fl > 0 {
				floors = append(floors, fl)
				overFloor = append(overFloor, 2*typ/fl)
			}
		}
		if len(ratios) < b.pairs {
			continue
		}
		b.row(name, spread(softs, 1, " us"), spread(raws, 1, " us"), timesSpread(ratios))
		if len(floors) == b.pairs {
			b.row("  the same pairs against the floor (udpfloor -connect, run between them)", "",
				spread(floors, 1, " us"), timesSpread(overFloor))
		}
	}
}

// scale: max_qp QPs to RTS on one device; rdma_cm connections between two
// processes, each moving a SEND; and many QPs' aggregate bandwidth.
func (b *bench) scale() {
	out, err := b.run(5*time.Minute, "bench", "qpscale", "-n", strconv.Itoa(b.scaleQPs))
	f := fields(out)
	if err != nil || f["qps"] == 0 {
		b.fail("QPs to RTS on one device", err, out)
	} else {
		b.row(fmt.Sprintf("%d QPs created and brought to RTS, one device", int(f["qps"])),
			fmt.Sprintf("%.2f s; %.1f KiB heap, %.1f KiB RSS per QP", f["rts_s"], f["heap_per_qp"]/1024, f["rss_per_qp"]/1024), "", "")
	}
	n := strconv.Itoa(b.cmConns)
	sout, cout, err := b.pair(10*time.Minute, "bench", []string{"cm-server", "-n", n}, []string{"cm-client", "-n", n})
	c, s := fields(cout), fields(sout)
	if err != nil || c["conns"] == 0 {
		b.fail(n+" RC connections by rdma_cm, two processes", err, cout+sout)
	} else {
		b.row(n+" RC connections by rdma_cm, two processes, a SEND on each",
			fmt.Sprintf("%.0f connections/s; client %.1f / server %.1f KiB heap per QP, %.1f / %.1f KiB RSS; %.0f disconnects reached the server (%.0f MADs found no receive buffer and were resent)",
				c["conn_per_s"], c["heap_per_conn"]/1024, s["heap_per_conn"]/1024, c["rss_per_conn"]/1024, s["rss_per_conn"]/1024, s["disconnected"], s["ud_no_recv"]), "", "")
	}
	b.aggregate()
}

// aggregate: WRITE 64 KiB with 1 QP and with 1,000 QPs (16 deep each), one
// after the other; with -pairs, that many times alternately, reporting the
// median of the pairs' ratios (a single pair can straddle a change of the
// machine's speed).
func (b *bench) aggregate() {
	d := strconv.Itoa(max(int(b.dur.Seconds()), 1))
	run := func(q string) (float64, error) {
		_, cout, err := b.perf("write_bw", "-s", "65536", "-m", "4096", "-D", d, "-q", q, "-t", "16")
		r, ok := parseBW(cout)
		if err == nil && !ok {
			err = fmt.Errorf("no report in %q", cout)
		}
		return r.mbs / 1000, err
	}
	if b.pairs <= 0 {
		one, err := run("1")
		if err != nil {
			b.fail("RC WRITE 64 KiB aggregate, 1 QPs", err, "")
			return
		}
		b.row("RC WRITE 64 KiB aggregate, 1 QPs (-t 16)", fmt.Sprintf("%.2f GB/s", one), "", "")
		many, err := run("1000")
		if err != nil {
			b.fail("RC WRITE 64 KiB aggregate, 1000 QPs", err, "")
			return
		}
		b.row("RC WRITE 64 KiB aggregate, 1000 QPs (-t 16)", fmt.Sprintf("%.2f GB/s", many), "", pct(many, one)+" of 1 QP")
		return
	}
	name := fmt.Sprintf("RC WRITE 64 KiB aggregate, 1000 QPs and 1 QP (-t 16), %d pairs run alternately", b.pairs)
	var ratios, ones, manys []float64
	for range b.pairs {
		one, err := run("1")
		if err != nil {
			b.fail(name, err, "")
			return
		}
		many, err := run("1000")
		if err != nil {
			b.fail(name, err, "")
			return
		}
		ratios = append(ratios, many/one)
		ones = append(ones, one)
		manys = append(manys, many)
	}
	b.row(name, "1000 QPs: "+spread(manys, 2, " GB/s"), "1 QP: "+spread(ones, 2, " GB/s"), pctSpread(ratios, "1 QP"))
}

func (b *bench) print(w io.Writer, took time.Duration) {
	host, _ := os.Hostname()
	pinned := "processes not pinned"
	if b.pin {
		pinned = "servers on CPU 1, clients on CPU 0"
	}
	fmt.Fprintf(w, "\nsoftrdma bench, %s, %d CPUs, %s, %s (took %v)\n\n", host, numCPU(), pinned, time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	fmt.Fprintln(w, "| case | softrdma | raw reference, same run | ratio |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range b.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r[0], r[1], r[2], r[3])
	}
	for _, n := range b.notes {
		fmt.Fprintln(w, "\nnote:", n)
	}
}
