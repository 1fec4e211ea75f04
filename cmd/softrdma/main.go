// Command softrdma is the command-line face of the softrdma software RDMA
// device: a guided demo and rdma-core-style tools (devinfo, pingpong, perf,
// ping, cmatose, udaddy) that interoperate with Linux rxe and RoCE NICs,
// and a pcap reader (dump).
//
// "softrdma help" lists the commands; "softrdma COMMAND -h" prints a
// command's flags. Exit status: 0 on success and after help, 1 when the
// command fails, 2 for a usage error, and 128 plus the signal's number
// when interrupted (130 for Ctrl-C), without an error message.
//
// With SOFTRDMA_CPUPROFILE=FILE in the environment, the command writes a
// CPU profile of its run to FILE for "go tool pprof".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"syscall"
)

var commands = map[string]struct {
	run  func(ctx context.Context, args []string, out io.Writer) error
	help string
}{
	"demo":     {runDemo, "two devices on 127.0.0.1 and 127.0.0.2 over real UDP: SEND, WRITE, READ, atomics, bandwidth and latency"},
	"pingpong": {runPingpong, "ibv_rc/uc/ud/srq_pingpong: ping-pong with the rdma-core tools' TCP exchange (--type rc|uc|ud|srq)"},
	"devinfo":  {runDevinfo, "ibv_devinfo: device and port attributes; -v adds all attributes and the GID table"},
	"ibstat":   {runIBStat, "ibstat: the state of the local devices' ports (LID, SM LID, state, link layer)"},
	"dump":     {runDump, "print the RoCEv2 packets of a pcap file with softrdma's decoder"},
	"ping":     {runPing, "rping: RDMA READ/WRITE ping-pong over an rdma_cm connection (-s server, -c client)"},
	"cmatose":  {runCmatose, "ucmatose: RC connections over rdma_cm exchanging SENDs (-s addr: client)"},
	"udaddy":   {runUdaddy, "udaddy: UD QPs resolved with SIDR exchanging datagrams (-s addr: client)"},
	"mckey":    {runMckey, "mckey: join a multicast group with rdma_cm and send (-s) or receive UD datagrams (-m group)"},
	"stat":     {runStat, "rdma statistic show link: the counters a tool serves with --metrics, by Linux rxe's names"},
	"fabric":   {runFabric, "ibsim: an InfiniBand fabric from a topology file, served to OpenSM and infiniband-diags under ibsim-run"},
	"sm":       {runSMCmd, "opensm: softrdma's subnet manager on an ibsim fabric (Linux ibsim or softrdma fabric); -o sweeps once"},
	"version":  {func(_ context.Context, args []string, out io.Writer) error { return runVersion(args, out) }, "print the version of this build"},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softrdma COMMAND [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-9s %s\n", name, commands[name].help)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `"softrdma COMMAND -h" prints a command's flags.`)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	if isHelp(name) {
		if len(args) > 1 && name == "help" {
			// "softrdma help COMMAND" is "softrdma COMMAND -h".
			if _, ok := commands[args[1]]; ok {
				return run([]string{args[1], "-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "softrdma: unknown command %q\n", args[1])
			usage(stderr)
			return 2
		}
		usage(stdout)
		return 0
	}
	errOut = stderr
	defer func() { errOut = os.Stderr }()
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "softrdma: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	got := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigc:
			got <- s
			cancel()
		case <-ctx.Done():
		}
	}()
	stopProfile, err := startProfile(os.Getenv("SOFTRDMA_CPUPROFILE"))
	if err == nil {
		err = c.run(ctx, args[1:], stdout)
		stopProfile()
	}
	cancel()
	select {
	case s := <-got:
		// Interrupted: the user knows; exit as a shell expects.
		if n, ok := s.(syscall.Signal); ok {
			return 128 + int(n)
		}
		return 130
	default:
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "softrdma %s: %v\n", name, err)
	}
	return exitStatus(err)
}

// startProfile starts a CPU profile into the file named by path, if any,
// and returns the function that ends it.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("SOFTRDMA_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("SOFTRDMA_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(errOut, "softrdma: SOFTRDMA_CPUPROFILE: %v\n", err)
		}
	}, nil
}
