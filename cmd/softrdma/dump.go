package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/dump"
	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/wire"
)

// packetSource is what dump needs of a pcap or pcapng reader.
type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// openCapture opens a pcap or pcapng file.
func openCapture(path string) (packetSource, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if r, err := pcapgo.NewReader(bufio.NewReader(f)); err == nil {
		return r, f, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, err
	}
	r, err := pcapgo.NewNgReader(bufio.NewReader(f), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s is neither pcap nor pcapng: %w", path, err)
	}
	return r, f, nil
}

func runDump(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	port := fs.Uint("port", wire.UDPPort, "RoCEv2 UDP destination `port`")
	all := fs.Bool("a", false, "also list frames that are not RoCEv2")
	fs.Usage = usageFunc(fs, "dump [-port N] [-a] FILE.pcap", "Prints each RoCEv2 packet of a pcap or pcapng capture: time, endpoints, opcode, QPN, PSN (hex),\n"+
		"extension headers, payload length, ICRC check, and MADs on QP1.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if *port == 0 || *port > 65535 {
		return fmt.Errorf("%w: -port %d", tool.ErrUsage, *port)
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: need one capture file", tool.ErrUsage)
	}
	src, c, err := openCapture(pos[0])
	if err != nil {
		return err
	}
	defer c.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	var first time.Time
	var n, roce, other, bad, badICRC int
	elsewhere := map[uint16]int{} // RoCEv2 frames with a good ICRC on other ports
	for ctx.Err() == nil {
		data, ci, err := src.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("frame %d: %w", n+1, err)
		}
		n++
		if first.IsZero() {
			first = ci.Timestamp
		}
		t := ci.Timestamp.Sub(first)
		r, err := dump.Decode(src.LinkType(), data, uint16(*port))
		switch {
		case errors.Is(err, dump.ErrNotRoCE):
			other++
			// RoCEv2 on another port? Its ICRC says so.
			if p, ok := dump.UDPDstPort(src.LinkType(), data); ok {
				if r, err := dump.Decode(src.LinkType(), data, p); err == nil && r.ICRCOK {
					elsewhere[p]++
				}
			}
			if *all {
				fmt.Fprintf(w, "%11.6f (%v)\n", t.Seconds(), err)
			}
			continue
		case err != nil:
			bad++
			fmt.Fprintf(w, "%11.6f malformed: %v\n", t.Seconds(), err)
			continue
		}
		roce++
		if !r.ICRCOK {
			badICRC++
		}
		if err := dump.Format(w, t, &r); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "%d frames: %d RoCEv2 (%d with a bad ICRC), %d malformed, %d other\n", n, roce, badICRC, bad, other)
	for _, p := range slices.Sorted(maps.Keys(elsewhere)) {
		fmt.Fprintf(w, "%d frames to UDP port %d are RoCEv2 (their ICRCs check): run with -port %d to decode them\n", elsewhere[p], p, p)
	}
	if roce == 0 && len(elsewhere) == 0 && other > 0 {
		fmt.Fprintf(w, "nothing was RoCEv2 on UDP port %d; if the capture's RoCE traffic used another port, name it with -port\n", *port)
	}
	return ctx.Err()
}
