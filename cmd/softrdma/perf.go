// softrdma perf: the perftest benchmarks (ib_write_bw, ib_read_lat, ...) on
// a softrdma device, interoperating with perftest in either role.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
)

func init() {
	commands["perf"] = struct {
		run  func(ctx context.Context, args []string, out io.Writer) error
		help string
	}{runPerf, "perftest benchmarks: write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat"}
}

// sizeValue parses -s as perftest does: a number with an optional K or M.
type sizeValue struct {
	n   int
	set bool
}

func (s *sizeValue) String() string { return strconv.Itoa(s.n) }

func (s *sizeValue) Set(v string) error {
	f := 1
	switch {
	case strings.HasSuffix(v, "K"):
		f, v = 1024, strings.TrimSuffix(v, "K")
	case strings.HasSuffix(v, "M"):
		f, v = 1024*1024, strings.TrimSuffix(v, "M")
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil || n < 1 || n*int64(f) > 1<<31-1 {
		return fmt.Errorf("message size %q: want 1..%d, optionally with K or M", v, 1<<31-1)
	}
	s.n, s.set = int(n)*f, true
	return nil
}

// perfTests describes the tests.
func perfTests() string {
	names := append([]string(nil), perftest.TestNames...)
	sort.Strings(names)
	return fmt.Sprintf("TEST is one of %s;\neach interoperates with perftest's ib_TEST. The flags are the same for every test.", strings.Join(names, ", "))
}

func runPerf(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "help" {
		if len(args) > 0 && isHelp(args[0]) {
			// The flags are every test's: show them with any test's set.
			return runPerf(ctx, []string{perftest.TestNames[0], "-h"}, out)
		}
		fmt.Fprintln(errOut, "usage: softrdma perf TEST [flags] [SERVER]")
		fmt.Fprintln(errOut, perfTests())
		return fmt.Errorf("%w: name a test", tool.ErrUsage)
	}
	name := args[0]
	test, ok := perftest.Tests[name]
	if !ok {
		fmt.Fprintln(errOut, perfTests())
		return fmt.Errorf("%w: unknown test %q", tool.ErrUsage, name)
	}
	cfg := perftest.Config{Test: test}
	fs := flag.NewFlagSet("perf "+name, flag.ContinueOnError)
	var tf tool.Flags
	tf.Register(fs)
	tf.RegisterIB(fs)
	for _, n := range []string{"x", "gid-index"} {
		fs.IntVar(&tf.GIDIdx, n, -1, "GID `index` (same as -g)")
	}
	var size sizeValue
	for _, n := range []string{"s", "size"} {
		fs.Var(&size, n, "message `size` in bytes, K or M suffix allowed (default 65536 for bw, 2 for lat, 8 for atomics)")
	}
	intFlag := func(p *int, def int, usage string, names ...string) {
		for _, n := range names {
			fs.IntVar(p, n, def, usage)
		}
	}
	boolFlag := func(p *bool, usage string, names ...string) {
		for _, n := range names {
			fs.BoolVar(p, n, false, usage)
		}
	}
	intFlag(&cfg.Iters, 0, "`iterations` (default 5000 for write_bw, else 1000)", "n", "iters")
	boolFlag(&cfg.All, "run all message sizes from 2 to 2^23 bytes", "a", "all")
	intFlag(&cfg.MTU, 0, "path `MTU` in bytes: 256..4096 (default: the port's active MTU)", "m", "mtu")
	var durSecs int
	intFlag(&durSecs, 0, "run for `seconds` instead of a number of iterations", "D", "duration")
	intFlag(&cfg.NumQPs, 1, "number of `QPs` (bw tests)", "q", "qp")
	intFlag(&cfg.TxDepth, 0, "send queue `depth` (default 128 for bw, 1 for lat)", "t", "tx-depth")
	intFlag(&cfg.RxDepth, 0, "receive queue `depth` of SEND tests (default 512)", "r", "rx-depth")
	intFlag(&cfg.Inline, -1, "largest message sent `inline` (default 0 for bw, 220 write_lat, 236 send_lat)", "I", "inline_size")
	intFlag(&cfg.CQMod, 0, "a completion every `N` messages (bw; default 100, 1 above 8 KiB)", "Q", "cq-mod")
	intFlag(&cfg.Port, perftest.DefaultPort, "TCP `port` of the out-of-band exchange (rdma_cm port with -R)", "p", "port")
	var timeout int
	var sl int
	intFlag(&sl, 0, "service `level` of the QPs' paths (InfiniBand ports, --hca)", "S", "sl")
	intFlag(&timeout, 14, "QP local ACK timeout `exponent` (4.096 us * 2^N)", "u", "qp-timeout")
	boolFlag(&cfg.IgnoreCPUFreq, "ignore CPU frequency warnings (accepted for perftest compatibility)", "F", "CPU-freq")
	boolFlag(&cfg.Duplex, "bidirectional: both sides post and each reports the sum (write_bw, read_bw, atomic_bw)", "b", "bidirectional")
	boolFlag(&cfg.Events, "sleep until a completion arrives instead of polling the CQ", "e", "events")
	boolFlag(&cfg.Gbits, "report Gb/s instead of MB/s", "report_gbits", "report-gbits")
	boolFlag(&cfg.RDMACM, "connect the QPs with rdma_cm and exchange over them instead of TCP (-p is the rdma_cm port)", "R", "rdma_cm")
	intFlag(&cfg.PostList, 1, "post `N` work requests per post call (bw tests; the CQ moderation becomes N unless -Q)", "l", "post_list")
	var conn, output string
	for _, n := range []string{"c", "connection"} {
		fs.StringVar(&conn, n, "RC", "connection `type`: RC, UC (not read/atomic) or UD (send tests)")
	}
	fs.StringVar(&output, "output", "", "print only one number: `bandwidth` or message_rate (bw tests), latency (lat tests)")
	atomic := fs.String("A", "FETCH_AND_ADD", "atomic `type`: CMP_AND_SWAP or FETCH_AND_ADD (atomic tests)")
	showProgress := fs.Bool("progress", true, "with -a or -D, show a progress line on stderr when it is a terminal (softrdma extension)")
	stats := fs.Bool("stats", false, "after the run, report the link's packets and system calls and the CPU time used (softrdma extension)")
	verbose := fs.Bool("v", false, "log the device's debug messages to stderr (warnings are always logged)")
	fs.Usage = usageFunc(fs, "perf TEST [flags]            (server)\nperf TEST [flags] SERVER     (client)", perfTests()+
		"\nOn an InfiniBand port (--hca NODE[:PORT] of the fabric at --fabric) the sides exchange LIDs and\n"+
		"address each other by LID and SL (-S), as perftest does on an HCA; -x adds a GRH.")
	pos, err := parseFlags(fs, args[1:], out)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: one server address expected, got %q", perftest.ErrUsage, pos)
	}
	if len(pos) == 1 {
		cfg.Server = pos[0]
	}
	if size.set {
		cfg.SetSize(size.n)
	}
	if durSecs < 0 {
		return fmt.Errorf("%w: duration %d", perftest.ErrUsage, durSecs)
	}
	cfg.Duration = time.Duration(durSecs) * time.Second
	if timeout < 1 || timeout > 31 {
		return fmt.Errorf("%w: QP timeout %d (1..31)", perftest.ErrUsage, timeout)
	}
	cfg.Timeout = uint8(timeout)
	if sl < 0 || sl > 15 {
		return fmt.Errorf("%w: SL %d (0..15)", perftest.ErrUsage, sl)
	}
	cfg.SL = uint8(sl)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["A"] && test.Verb != perftest.Atomic {
		return fmt.Errorf("%w: -A is for the atomic tests", perftest.ErrUsage)
	}
	if cfg.Atomic, err = perftest.ParseAtomicType(*atomic); err != nil {
		return err
	}
	if cfg.Conn, err = perftest.ParseConn(conn, test.Verb); err != nil {
		return err
	}
	if output != "" {
		if cfg.Output, err = perftest.ParseOutput(output); err != nil {
			return err
		}
	}
	cfg.IBPort = tf.IBPort
	cfg.NoPollReceive = !tf.BusyPoll
	cfg.Out = out
	if err := cfg.Normalize(); err != nil {
		return err
	}

	log := toolLogger()
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	dev, err := tf.Open(ctx, cfg.Server, log)
	if err != nil {
		return err
	}
	defer dev.Close()
	cfg.GIDIndex = dev.GIDIndex
	if (cfg.All || cfg.Duration > 0) && *showProgress && isTerminal(os.Stderr) {
		// Long runs show where they are, on the terminal only.
		p := startProgress(os.Stderr, "perf "+name, cfg.Duration, time.Second)
		defer p.end()
		cfg.Out, cfg.Progress = p.around(cfg.Out), p.size
	}
	if !*stats {
		return perftest.Run(ctx, cfg, dev.Device, nil)
	}
	before := takeStats(dev.Link())
	err = perftest.Run(ctx, cfg, dev.Device, nil)
	if err == nil {
		takeStats(dev.Link()).report(out, before)
		reportCounters(out, dev.Device)
	}
	return err
}
