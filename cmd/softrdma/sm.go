package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/sm/sa"
)

// smFlags are the SM settings "softrdma sm" and "softrdma fabric" share.
type smFlags struct {
	lmc        *uint
	priority   *uint
	routing    *string
	interval   *time.Duration
	partitions string
	qos        string
}

func addSMFlags(fs *flag.FlagSet) *smFlags {
	f := &smFlags{
		lmc:      fs.Uint("lmc", 0, "LID mask control of CA ports: each gets 2^LMC LIDs (0-7)"),
		priority: fs.Uint("priority", 0, "the SM's priority in master election (0-15)"),
		routing:  fs.String("routing", sm.RoutingMinHop, "routing engine: minhop or updn (up/down, deadlock-free, for fat trees)"),
		interval: fs.Duration("sweep", sm.DefaultSweepInterval, "period of light sweeps"),
	}
	const pu = "partition policy `FILE` in OpenSM's partitions.conf format (P_Key tables, switch enforcement)"
	fs.StringVar(&f.partitions, "partitions", "", pu)
	fs.StringVar(&f.partitions, "P", "", "same as -partitions (opensm -P)")
	fs.StringVar(&f.partitions, "Pconfig", "", "same as -partitions (opensm --Pconfig)")
	const qu = "QoS policy `FILE`: an opensm.conf whose qos options (qos TRUE, qos_sl2vl, qos_vlarb_high, ...) the SM writes; its qos_policy_file (OpenSM's qos-policy.conf) gives the SA's paths their SL"
	fs.StringVar(&f.qos, "qos", "", qu)
	return f
}

// config returns the SM's configuration, with the policy files read.
func (f *smFlags) config(log *slog.Logger) (sm.Config, error) {
	cfg := sm.Config{LMC: uint8(min(*f.lmc, 255)), Priority: uint8(min(*f.priority, 255)), Routing: *f.routing,
		SweepInterval: *f.interval, Logger: log}
	if f.partitions != "" {
		r, err := os.Open(f.partitions)
		if err != nil {
			return cfg, err
		}
		defer r.Close()
		if cfg.Partitions, err = policy.ParsePartitions(r); err != nil {
			return cfg, fmt.Errorf("%s: %w", f.partitions, err)
		}
	}
	if f.qos != "" {
		r, err := os.Open(f.qos)
		if err != nil {
			return cfg, err
		}
		defer r.Close()
		if cfg.QoS, err = policy.ParseQoS(r); err != nil {
			return cfg, fmt.Errorf("%s: %w", f.qos, err)
		}
		if !cfg.QoS.Enabled {
			log.Warn("sm: the QoS file does not say \"qos TRUE\": QoS tables are left as they are", "file", f.qos)
		}
		if pf := cfg.QoS.PolicyFile; pf != "" {
			// Read here to fail early; startSMSA reads it for the SA.
			pr, err := os.Open(pf)
			if err != nil {
				return cfg, err
			}
			_, err = policy.ParseQoSPolicy(pr)
			pr.Close()
			if err != nil {
				return cfg, fmt.Errorf("%s: %w", pf, err)
			}
		}
	}
	return cfg, nil
}

// startSMSA starts softrdma's SM on t with its SA beside it (the SA
// answers the SA MADs that reach the SM's port). On error t is closed
// (by sa.Attach).
func startSMSA(t sm.Transport, cfg sm.Config, log *slog.Logger) (*sa.SM, error) {
	sac := sa.Config{Logger: log}
	if cfg.QoS != nil && cfg.QoS.PolicyFile != "" {
		// The -qos file's qos_policy_file: the SLs of the SA's paths.
		r, err := os.Open(cfg.QoS.PolicyFile)
		if err != nil {
			t.Close()
			return nil, err
		}
		sac.QoSPolicy, err = policy.ParseQoSPolicy(r)
		r.Close()
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("%s: %w", cfg.QoS.PolicyFile, err)
		}
	}
	m, err := sa.Attach(t, cfg, sac)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", tool.ErrUsage, err)
	}
	return m, nil
}

// runSMCmd runs softrdma's subnet manager as a client of an ibsim server:
// Linux ibsim or "softrdma fabric".
func runSMCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sm", flag.ContinueOnError)
	sock := fs.String("ibsim", "", "base of the ibsim server's unix socket names (default $IBSIM_SOCKNAME or \"sim\")")
	udp := fs.String("udp", "", "reach an ibsim server in inet mode at `HOST:PORT` (its control port) instead")
	node := fs.String("node", "", "the node to attach at, as SIM_HOST names it (default $SIM_HOST, else the server's first)")
	once := fs.Bool("o", false, "sweep once, print the subnet and exit (as opensm -o)")
	verbose := fs.Bool("v", false, "log at Debug level")
	sf := addSMFlags(fs)
	fs.Usage = usageFunc(fs, "sm [-ibsim SOCKNAME | -udp HOST:PORT] [-node NAME] [-o] [-lmc N] [-priority N] [-routing minhop|updn] [-sweep D] [-partitions FILE] [-qos FILE] [-v]",
		"Runs softrdma's subnet manager on an InfiniBand fabric served with ibsim's client protocol (Linux\n"+
			"ibsim, or softrdma fabric -sm=false): it discovers the subnet by directed-route SMPs, assigns LIDs,\n"+
			"programs every switch's forwarding table and brings every port to ACTIVE, then sweeps again\n"+
			"every -sweep and on traps until interrupted; its subnet administrator answers SA queries (saquery,\n"+
			"rdma_cm's path records, multicast joins) at the same port. With -o it sweeps once and exits.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	if *sock != "" && *udp != "" {
		return fmt.Errorf("%w: -ibsim and -udp exclude each other", tool.ErrUsage)
	}
	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	cfg, err := sf.config(log)
	if err != nil {
		return err
	}
	ccfg := ibsim.ClientConfig{SockName: *sock, Node: *node}
	if ccfg.SockName == "" {
		ccfg.SockName = os.Getenv("IBSIM_SOCKNAME")
	}
	if ccfg.Node == "" {
		ccfg.Node = os.Getenv("SIM_HOST")
	}
	if *udp != "" {
		ccfg = ibsim.ClientConfig{Network: "udp", Addr: *udp, Node: ccfg.Node}
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	t, err := sm.IbsimTransport(dctx, ccfg)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting to the ibsim server: %w", err)
	}
	m, err := startSMSA(t, cfg, log)
	if err != nil {
		return err
	}
	defer m.Close()
	if !*once {
		err := m.Run(ctx)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	if err := m.Sweep(ctx); err != nil {
		return err
	}
	printSubnet(out, m)
	return nil
}

// printSubnet prints what a sweep found and set: one line per node with
// its LIDs, then the sweep's figures.
func printSubnet(out io.Writer, m *sa.SM) {
	sn := m.Subnet()
	lids := 0
	for _, n := range sn.Nodes {
		kind := "Ca"
		if n.Switch != nil {
			kind = "Switch"
		}
		fmt.Fprintf(out, "%-6s %#016x %q", kind, n.Info.NodeGUID, n.Desc)
		for _, p := range n.Ports {
			if p == nil || (n.Switch != nil && p.Num != 0) {
				continue
			}
			lids++
			fmt.Fprintf(out, " port %d lid %d", p.Num, p.Info.LID)
		}
		fmt.Fprintln(out)
	}
	st := m.Stats()
	fmt.Fprintf(out, "SUBNET UP: %d nodes, %d LIDs, SM LID %d, sweep took %v (%d SMPs)\n",
		len(sn.Nodes), lids, sn.SMLID, st.LastSweep.Round(time.Microsecond), st.Sent)
}

// startFabricSM runs softrdma's SM embedded in "softrdma fabric", at the
// first CA port of the topology that has a link, until ctx ends; the
// returned function stops it.
func startFabricSM(ctx context.Context, fab *fabric.Fabric, topo *fabric.Topology, sf *smFlags, log *slog.Logger) (func(), error) {
	var node *fabric.Node
	port := 0
	for _, tn := range topo.Nodes {
		if tn.Type != 1 { // a CA
			continue
		}
		for i := 1; i <= tn.NumPorts() && node == nil; i++ {
			if tn.Ports[i].Remote != "" {
				node, port = fab.NodeByName(tn.ID), i
			}
		}
		if node != nil {
			break
		}
	}
	if node == nil {
		return nil, fmt.Errorf("no CA port with a link for the SM (-sm=false leaves the subnet to another SM)")
	}
	cfg, err := sf.config(log)
	if err != nil {
		return nil, err
	}
	t, err := sm.FabricTransport(fab, node, port)
	if err != nil {
		return nil, err
	}
	m, err := startSMSA(t, cfg, log)
	if err != nil {
		return nil, err
	}
	// The fabric hands the SA the queries HCAs send to this port on the
	// data plane, and carries its answers back there.
	log.Info("fabric: subnet manager and administrator", "node", node.Name(), "port", port)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
		m.Close()
	}, nil
}
