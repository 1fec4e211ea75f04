// Command softrdma is the command-line face of the softrdma software RDMA
// device: a guided demo and rdma-core-style tools (devinfo, pingpong) that
// interoperate with Linux rxe and RoCE NICs, and a pcap reader (dump).
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
)

var commands = map[string]struct {
	run  func(ctx context.Context, args []string, out io.Writer) error
	help string
}{
	"demo":     {runDemo, "two devices on 127.0.0.1 and 127.0.0.2 over real UDP: SEND, WRITE, READ, atomics, bandwidth and latency"},
	"pingpong": {runPingpong, "ibv_rc/uc/ud/srq_pingpong: ping-pong with the rdma-core tools' TCP exchange (--type rc|uc|ud|srq)"},
	"devinfo":  {runDevinfo, "ibv_devinfo: device and port attributes; -v adds all attributes and the GID table"},
	"dump":     {runDump, "print the RoCEv2 packets of a pcap file with softrdma's decoder"},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softrdma <command> [flags]")
	fmt.Fprintln(w, "commands:")
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-9s %s\n", name, commands[name].help)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "softrdma: unknown command %q\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.run(ctx, os.Args[2:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "softrdma %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
