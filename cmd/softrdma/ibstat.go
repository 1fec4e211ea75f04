package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/internal/netif"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
)

// runIBStat prints the local devices' ports as infiniband-diags' ibstat
// does: ibstat [-l] [-p] [-s] [CA [port]].
func runIBStat(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ibstat", flag.ContinueOnError)
	var list, guids, short bool
	fs.BoolVar(&list, "l", false, "list the CA names")
	fs.BoolVar(&guids, "p", false, "list the port GUIDs")
	fs.BoolVar(&short, "s", false, "print short device information")
	var bind string
	fs.StringVar(&bind, "bind", "", "describe a device on these comma-separated `addresses` (softrdma extension)")
	var tf tool.Flags
	tf.RegisterIB(fs)
	fs.Usage = usageFunc(fs, "ibstat [flags] [CA_name] [portnum]", "Prints the state of the local softrdma devices' ports, as infiniband-diags' ibstat does.\n"+
		"With --hca, the device on that CA port of an InfiniBand fabric (attached while it is described).")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 2 {
		return fmt.Errorf("unexpected argument %q", pos[2])
	}
	name := ""
	if len(pos) > 0 {
		name = pos[0]
	}
	if len(pos) == 2 {
		if n, err := strconv.Atoi(pos[1]); err != nil || n != 1 {
			return fmt.Errorf("invalid port %q: softrdma devices have port 1", pos[1])
		}
	}
	if tf.IsIB() {
		if bind != "" {
			return fmt.Errorf("%w: --bind and --hca exclude each other", tool.ErrUsage)
		}
		tf.Dev, tf.BusyPoll = name, true
		return withIBDevice(ctx, &tf, func(d *tool.Device) error {
			switch {
			case list:
				fmt.Fprintln(out, d.Name())
			case guids:
				fmt.Fprintf(out, "0x%016x\n", portGUID(d.Device))
			default:
				return writeIBStat(out, d.Name(), d.Device, true, short)
			}
			return nil
		})
	}
	devs, err := infoDevices(name, bind)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if list {
			fmt.Fprintln(out, d.name)
			continue
		}
		err := withInfoDevice(d, func(dev *verbs.Device, up bool) error {
			if guids {
				fmt.Fprintf(out, "0x%016x\n", portGUID(dev))
				return nil
			}
			return writeIBStat(out, d.name, dev, up, short)
		})
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// withInfoDevice opens d on an in-process link, as devinfo's describe
// does, and calls f with it and whether its interface is up.
func withInfoDevice(d infoDevice, f func(dev *verbs.Device, up bool) error) error {
	mtu := verbs.MTU1024
	ifc := d.ifc
	if ifc == nil {
		if i, err := netif.InterfaceOf(d.addrs[0]); err == nil {
			ifc = i
		}
	}
	up := true
	if ifc != nil {
		mtu = tool.PathMTU(ifc.MTU)
		up = ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagRunning != 0
	}
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	l, err := network.Attach(d.addrs, link.DefaultPort)
	if err != nil {
		return err
	}
	dev, err := verbs.Open(l, &verbs.Options{Name: d.name, MTU: mtu, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		l.Close()
		return err
	}
	defer dev.Close()
	return f(dev, up)
}

// portGUID is the port's GUID: GID 0's interface ID on InfiniBand, the node
// GUID on RoCE (as rxe reports it).
func portGUID(dev *verbs.Device) uint64 {
	if p, err := dev.QueryPort(1); err == nil && p.LinkLayer == verbs.LinkLayerInfiniBand {
		var g uint64
		for _, b := range dev.GIDs()[0][8:] {
			g = g<<8 | uint64(b)
		}
		return g
	}
	return dev.QueryDevice().NodeGUID
}

// ibstatStates and ibstatPhys name port states as ibstat prints them.
var (
	ibstatStates = map[verbs.PortState]string{verbs.PortDown: "Down", verbs.PortInit: "Initializing",
		verbs.PortArmed: "Armed", verbs.PortActive: "Active"}
	ibstatPhys = map[uint8]string{1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
		5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test"}
)

// writeIBStat prints one device as ibstat does. up is the interface's
// state for a RoCE device; an InfiniBand port reports its own.
func writeIBStat(w io.Writer, name string, dev *verbs.Device, up, short bool) error {
	a := dev.QueryDevice()
	p, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	state, phys := p.State, uint8(5)
	if p.LinkLayer == verbs.LinkLayerInfiniBand {
		phys = p.PhysState
	} else if !up {
		state, phys = verbs.PortDown, 3
	}
	fmt.Fprintf(w, "CA '%s'\n", name)
	fmt.Fprintf(w, "\tCA type: softrdma\n")
	fmt.Fprintf(w, "\tNumber of ports: %d\n", a.PhysPortCount)
	fmt.Fprintf(w, "\tFirmware version: %s\n", a.FWVersion)
	fmt.Fprintf(w, "\tHardware version: %x\n", a.HWVer)
	fmt.Fprintf(w, "\tNode GUID: 0x%016x\n", a.NodeGUID)
	fmt.Fprintf(w, "\tSystem image GUID: 0x%016x\n", a.SysImageGUID)
	if short {
		return nil
	}
	fmt.Fprintf(w, "\tPort 1:\n")
	fmt.Fprintf(w, "\t\tState: %s\n", ibstatStates[state])
	fmt.Fprintf(w, "\t\tPhysical state: %s\n", ibstatPhys[phys])
	fmt.Fprintf(w, "\t\tRate: %g\n", 2.5*float64(p.ActiveSpeed*p.ActiveWidth))
	fmt.Fprintf(w, "\t\tBase lid: %d\n", p.LID)
	fmt.Fprintf(w, "\t\tLMC: %d\n", p.LMC)
	fmt.Fprintf(w, "\t\tSM lid: %d\n", p.SMLID)
	fmt.Fprintf(w, "\t\tCapability mask: 0x%08x\n", p.PortCapFlags)
	fmt.Fprintf(w, "\t\tPort GUID: 0x%016x\n", portGUID(dev))
	fmt.Fprintf(w, "\t\tLink layer: %s\n", p.LinkLayer)
	return nil
}
