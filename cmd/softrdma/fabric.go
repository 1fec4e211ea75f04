package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/fabric/remote"
)

// runFabric runs an emulated InfiniBand fabric from a topology file and
// serves it to management programs as Linux ibsim does.
func runFabric(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fabric", flag.ContinueOnError)
	sock := fs.String("s", "", "base of the unix socket names (ibsim's IBSIM_SOCKNAME; default $IBSIM_SOCKNAME or \"sim\")")
	port := fs.Int("p", 0, "serve over UDP on this control port and the next 10 (ibsim -r -l PORT; clients set IBSIM_SERVER_NAME and IBSIM_SERVER_PORT)")
	verbose := fs.Bool("v", false, "log every client's MADs that go nowhere (Debug)")
	hca := fs.String("hca", remote.DefaultAddr, "serve the CA ports to softrdma devices in other processes and hosts at `ADDR`: a TCP host:port,\n"+
		"or a unix socket (unix:PATH, or a path with a slash); \"off\" serves none")
	withSM := fs.Bool("sm", true, "run softrdma's subnet manager at the first CA port (-sm=false leaves the subnet to OpenSM or softrdma sm)")
	sf := addSMFlags(fs)
	downOnDetach := fs.Bool("down-on-detach", false, "take a CA port's link down also when its device detaches on purpose (a device that dies always does)")
	fs.Usage = usageFunc(fs, "fabric [-s SOCKNAME | -p PORT] [-hca ADDR] [-down-on-detach] [-sm=false] [-partitions FILE] [-qos FILE] [-v] TOPOLOGY",
		"Runs an InfiniBand fabric of switches and HCAs described by TOPOLOGY (ibnetdiscover's format, as\n"+
			"Linux ibsim reads it) and serves it with ibsim's client protocol, so that programs run under\n"+
			"libumad2sim (ibsim-run opensm, smpquery, ibnetdiscover, ...) manage it. Its CA ports are served\n"+
			"at -hca's address: a softrdma device attaches one (fabric/remote's Dial) and sends and receives\n"+
			"IB packets through the switches; a device that dies takes its port's link down (trap 128 to the\n"+
			"SM). softrdma's SM manages the subnet unless -sm=false; its SA answers the HCAs' queries (rdma_cm's\n"+
			"PathRecords: ping, cmatose, perf -R on --hca) on the data plane at the SM's port. Runs until interrupted.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: need one topology file", tool.ErrUsage)
	}
	if *sock != "" && *port != 0 {
		return fmt.Errorf("%w: -s and -p exclude each other", tool.ErrUsage)
	}
	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	f, err := os.Open(pos[0])
	if err != nil {
		return err
	}
	topo, err := fabric.ParseTopology(f, pos[0])
	f.Close()
	if err != nil {
		return err
	}
	fab, err := fabric.New(topo, &fabric.Options{Logger: log})
	if err != nil {
		return err
	}
	defer fab.Close()
	if *withSM {
		stop, err := startFabricSM(ctx, fab, topo, sf, log)
		if err != nil {
			return err
		}
		defer stop()
	}

	cfg := ibsim.Config{SockName: *sock, Logger: log}
	if cfg.SockName == "" {
		cfg.SockName = os.Getenv("IBSIM_SOCKNAME")
	}
	if *port != 0 {
		cfg = ibsim.Config{Network: "udp", Addr: ":" + strconv.Itoa(*port), Logger: log}
	}
	srv, err := ibsim.NewServer(ibsim.FabricBackend(fab), cfg)
	if err != nil {
		return err
	}
	var rsrv *remote.Server
	if *hca != "off" && *hca != "" {
		network, addr := remote.SplitAddr(*hca)
		rsrv, err = remote.NewServer(fab, remote.Config{Network: network, Addr: addr, DownOnDetach: *downOnDetach, Logger: log})
		if err != nil {
			srv.Close()
			return fmt.Errorf("serving HCA ports at %s: %w", *hca, err)
		}
		log.Info("fabric: serving HCA ports", "network", network, "addr", rsrv.Addr().String())
	}
	log.Info("fabric: serving ibsim clients", "topology", pos[0], "nodes", len(fab.Nodes()),
		"addr", strings.TrimSuffix(srv.Addr().String(), "\x00"))
	if rsrv == nil {
		return srv.Serve(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rdone := make(chan error, 1)
	go func() { rdone <- rsrv.Serve(ctx) }()
	err = srv.Serve(ctx)
	cancel()
	if rerr := <-rdone; err == nil {
		err = rerr
	}
	return err
}
