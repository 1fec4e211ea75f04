package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/pingpong"
	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
)

// parseInterspersed parses flags that may come before or after the
// positional arguments, as getopt does, and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// toolLogger logs warnings and errors of the device to stderr.
func toolLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func runPingpong(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	var tf tool.Flags
	tf.Register(fs)
	tf.RegisterIB(fs)
	typ := fs.String("type", "rc", "transport: `rc`, uc, ud or srq (as ibv_rc/uc/ud/srq_pingpong)")
	var cfg pingpong.Config
	var odp bool
	for _, n := range []string{"p", "port"} {
		fs.IntVar(&cfg.TCPPort, n, pingpong.DefaultTCPPort, "listen on/connect to TCP `port`")
	}
	for _, n := range []string{"s", "size"} {
		fs.IntVar(&cfg.Size, n, 0, "`size` of message to exchange (default 4096; ud: 1024)")
	}
	for _, n := range []string{"m", "mtu"} {
		fs.IntVar(&cfg.MTU, n, pingpong.DefaultMTU, "path MTU in `bytes` (rc, uc, srq)")
	}
	for _, n := range []string{"r", "rx-depth"} {
		fs.IntVar(&cfg.RxDepth, n, pingpong.DefaultRxDepth, "number of receives to post at a time")
	}
	for _, n := range []string{"n", "iters"} {
		fs.IntVar(&cfg.Iters, n, pingpong.DefaultIters, "number of exchanges")
	}
	for _, n := range []string{"l", "sl"} {
		fs.IntVar(&cfg.SL, n, 0, "service level value")
	}
	for _, n := range []string{"e", "events"} {
		fs.BoolVar(&cfg.Events, n, false, "sleep on CQ events (default poll)")
	}
	for _, n := range []string{"c", "chk"} {
		fs.BoolVar(&cfg.Check, n, false, "validate received buffers (every message; invalid data fails the run)")
	}
	for _, n := range []string{"q", "num-qp"} {
		fs.IntVar(&cfg.NumQP, n, pingpong.DefaultNumQP, "number of QPs to use (srq)")
	}
	for _, n := range []string{"o", "odp"} {
		fs.BoolVar(&odp, n, false, "use on demand paging (rc, srq; softrdma memory is never pinned, so this changes nothing)")
	}
	for _, n := range []string{"t", "ts"} {
		fs.BoolVar(&cfg.Timestamps, n, false, "get CQE with timestamp: report the receive completions' intervals in device clock cycles (ns) (rc)")
	}
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "give up after this long without a client (server) or a completion, e.g. 10s (softrdma extension; default: wait forever)")
	fs.Usage = usageFunc(fs, "pingpong [flags]          (server: wait for a client)\npingpong [flags] HOST     (client: connect to the server on HOST)",
		"The rdma-core pingpong tests (ibv_rc/uc/ud/srq_pingpong) with their TCP exchange, defaults and output.\n"+
			"Both sides must agree on the flags that shape the test (--type, -s, -n, -c, ...).\n"+
			"On an InfiniBand port (--hca NODE[:PORT] of the fabric at --fabric) the sides exchange LIDs and\n"+
			"address each other by LID and SL (-l), as the C tools do on an HCA; -g adds a GRH.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return fmt.Errorf("%w: one host at most, got %q", tool.ErrUsage, pos)
	}
	if len(pos) == 1 {
		cfg.Host = pos[0]
	}
	if cfg.Type, err = pingpong.ParseType(*typ); err != nil {
		return err
	}
	if cfg.Timestamps && cfg.Type != pingpong.RC {
		return fmt.Errorf("%w: -t is an option of the rc pingpong only", tool.ErrUsage)
	}
	if odp {
		if cfg.Type != pingpong.RC && cfg.Type != pingpong.SRQ {
			return fmt.Errorf("%w: -o is an option of the rc and srq pingpongs only", tool.ErrUsage)
		}
		fmt.Fprintln(os.Stderr, "softrdma pingpong: -o: softrdma memory is not pinned; on-demand paging changes nothing")
	}
	if cfg.Size == 0 {
		cfg.Size = pingpong.DefaultSize
		if cfg.Type == pingpong.UD {
			cfg.Size = pingpong.DefaultUDSize
		}
	}
	if cfg.SL < 0 || cfg.SL > 15 {
		return fmt.Errorf("%w: SL %d (0..15)", tool.ErrUsage, cfg.SL)
	}
	cfg.Out = out
	dev, err := tf.Open(ctx, cfg.Host, toolLogger())
	if err != nil {
		return err
	}
	defer dev.Close()
	_, err = pingpong.Run(ctx, dev, cfg)
	return err
}
