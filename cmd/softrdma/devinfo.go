package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// infoDevice is a device to describe: a name, its addresses in GID order,
// and the interface it is on (nil for --bind).
type infoDevice struct {
	name  string
	addrs []netip.Addr
	ifc   *net.Interface
}

// infoDevices returns the devices devinfo describes: the one -d or --bind
// names, or one per interface that is up and has addresses.
func infoDevices(dev, bind string) ([]infoDevice, error) {
	if bind != "" {
		as, err := tool.ParseAddrs(bind)
		if err != nil {
			return nil, err
		}
		name := dev
		if name == "" {
			name = "softrdma0"
		}
		return []infoDevice{{name: name, addrs: as}}, nil
	}
	var ifs []net.Interface
	if dev != "" {
		ifc, err := net.InterfaceByName(strings.TrimPrefix(dev, tool.DevicePrefix))
		if err != nil {
			return nil, fmt.Errorf("IB device %s not found: %w", dev, err)
		}
		ifs = []net.Interface{*ifc}
	} else {
		all, err := net.Interfaces()
		if err != nil {
			return nil, err
		}
		for _, ifc := range all {
			if as, err := ifc.Addrs(); ifc.Flags&net.FlagUp != 0 && err == nil && len(as) > 0 {
				ifs = append(ifs, ifc)
			}
		}
		if len(ifs) == 0 {
			return nil, fmt.Errorf("no IB devices found: no interface is up with an IP address")
		}
	}
	var out []infoDevice
	for i := range ifs {
		as, err := roce.GIDOrder(&ifs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, infoDevice{name: tool.DevicePrefix + ifs[i].Name, addrs: as, ifc: &ifs[i]})
	}
	return out, nil
}

func runDevinfo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	var dev, bind string
	var port int
	var list, verbose bool
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&dev, n, "", "use device `name` (softrdma_IF or IF; default: every interface that is up with addresses)")
	}
	for _, n := range []string{"i", "ib-port"} {
		fs.IntVar(&port, n, 0, "use `port` of the device (default all ports)")
	}
	for _, n := range []string{"l", "list"} {
		fs.BoolVar(&list, n, false, "print only the device names")
	}
	for _, n := range []string{"v", "verbose"} {
		fs.BoolVar(&verbose, n, false, "print all the attributes of the device(s), with the GID table")
	}
	fs.StringVar(&bind, "bind", "", "describe a device on these comma-separated `addresses` (softrdma extension)")
	var tf tool.Flags
	tf.RegisterIB(fs)
	fs.Usage = usageFunc(fs, "devinfo [flags]", "Prints the attributes of softrdma devices, as ibv_devinfo does. A device is the IP addresses\n"+
		"of one interface; nothing is bound to describe it. With --hca, the device on that CA port of an\n"+
		"InfiniBand fabric: link layer InfiniBand, the LID, SM LID and port state the subnet manager set\n"+
		"(the port is attached while it is described, so not while another process has it).")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	if port != 0 && port != 1 {
		return fmt.Errorf("invalid port %d requested for device: softrdma devices have port 1", port)
	}
	if tf.IsIB() {
		if bind != "" {
			return fmt.Errorf("%w: --bind and --hca exclude each other", tool.ErrUsage)
		}
		tf.Dev, tf.BusyPoll = dev, true
		return withIBDevice(ctx, &tf, func(d *tool.Device) error {
			if list {
				fmt.Fprintf(out, "1 HCA found:\n\t%s\n", d.Name())
				return nil
			}
			return describeDevice(out, d.Name(), d.Device, true, verbose)
		})
	}
	devs, err := infoDevices(dev, bind)
	if err != nil {
		return err
	}
	if list {
		fmt.Fprintf(out, "%d HCA%s found:\n", len(devs), map[bool]string{true: "", false: "s"}[len(devs) == 1])
		for _, d := range devs {
			fmt.Fprintf(out, "\t%s\n", d.name)
		}
		return nil
	}
	for _, d := range devs {
		if err := describe(out, d, verbose); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// withIBDevice attaches the InfiniBand port tf's --hca names, calls f
// with the device on it and detaches.
func withIBDevice(ctx context.Context, tf *tool.Flags, f func(d *tool.Device) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // bounds the attach only
	defer cancel()
	d, err := tf.OpenIB(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer d.Close()
	return f(d)
}

// describe prints one device. It opens the device on an in-process link
// (link/loop), so nothing is bound: a device is described even while
// another process (or Linux rxe) holds UDP port 4791 on its addresses.
func describe(w io.Writer, d infoDevice, verbose bool) error {
	return withInfoDevice(d, func(dev *verbs.Device, up bool) error {
		return describeDevice(w, d.name, dev, up, verbose)
	})
}

// physStates names PortInfo's physical states as ibv_devinfo does.
var physStates = map[uint8]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION_TRAINING",
	5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY_TEST"}

// describeDevice prints an open device as ibv_devinfo does. up is the
// interface's state for a RoCE device; an InfiniBand port's state and
// physical state are the port's own.
func describeDevice(w io.Writer, name string, dev *verbs.Device, up, verbose bool) error {
	a := dev.QueryDevice()
	p, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	ib := p.LinkLayer == verbs.LinkLayerInfiniBand
	state, phys := p.State, "LINK_UP (5)"
	switch {
	case ib:
		phys = fmt.Sprintf("%s (%d)", physStates[p.PhysState], p.PhysState)
	case !up:
		state, phys = verbs.PortDown, "DISABLED (3)"
	}
	fmt.Fprintf(w, "hca_id:\t%s\n", name)
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVersion)
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCount)
	if verbose {
		fmt.Fprintf(w, "\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		fmt.Fprintf(w, "\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		for _, kv := range []struct {
			k string
			v int
		}{
			{"max_qp:\t\t\t\t", a.MaxQP}, {"max_qp_wr:\t\t\t", a.MaxQPWR}, {"max_sge:\t\t\t", a.MaxSGE},
			{"max_cq:\t\t\t\t", a.MaxCQ}, {"max_cqe:\t\t\t", a.MaxCQE}, {"max_mr:\t\t\t\t", a.MaxMR},
			{"max_pd:\t\t\t\t", a.MaxPD}, {"max_qp_rd_atom:\t\t\t", a.MaxQPRdAtom},
			{"max_res_rd_atom:\t\t", a.MaxResRdAtom}, {"max_qp_init_rd_atom:\t\t", a.MaxQPInitRdAtom},
		} {
			fmt.Fprintf(w, "\t%s%d\n", kv.k, kv.v) // tabs as ibv_devinfo's
		}
		atomic := map[verbs.AtomicCap]string{verbs.AtomicNone: "ATOMIC_NONE", verbs.AtomicHCA: "ATOMIC_HCA", verbs.AtomicGlob: "ATOMIC_GLOB"}[a.AtomicCap]
		fmt.Fprintf(w, "\tatomic_cap:\t\t\t%s (%d)\n", atomic, a.AtomicCap)
		fmt.Fprintf(w, "\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		fmt.Fprintf(w, "\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		fmt.Fprintf(w, "\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		fmt.Fprintf(w, "\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
		fmt.Fprintf(w, "\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		fmt.Fprintf(w, "\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		fmt.Fprintf(w, "\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
		fmt.Fprintf(w, "\tmax_inline_data:\t\t%d\n", a.MaxInlineData)
		if a.CompletionTimestampMask != 0 {
			fmt.Fprintf(w, "\tcompletion timestamp_mask:\t\t\t0x%016x\n", a.CompletionTimestampMask)
		} else {
			fmt.Fprintf(w, "\tcompletion_timestamp_mask not supported\n")
		}
		if a.HCACoreClock != 0 {
			fmt.Fprintf(w, "\thca_core_clock:\t\t\t%dkHZ\n", a.HCACoreClock)
		} else {
			fmt.Fprintf(w, "\tcore clock not supported\n")
		}
	}
	fmt.Fprintf(w, "\t\tport:\t1\n")
	fmt.Fprintf(w, "\t\t\tstate:\t\t\t%v (%d)\n", state, state)
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%v (%d)\n", p.MaxMTU, p.MaxMTU)
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%v (%d)\n", p.ActiveMTU, p.ActiveMTU)
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
	if verbose {
		fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSize)
		fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", p.PortCapFlags)
		fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTableLen)
		fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTableLen)
		fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s\n", phys)
		if ib {
			for i, g := range dev.GIDs() {
				fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%v\n", i, g)
			}
		} else {
			fmt.Fprintf(w, "\t\t\tudp_port:\t\t%d\n", link.DefaultPort)
			for i, g := range dev.GIDs() {
				fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%v, RoCE v2\n", i, g)
			}
		}
	}
	fmt.Fprintln(w)
	return nil
}

// guidString formats a GUID as ibv_devinfo does.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}
