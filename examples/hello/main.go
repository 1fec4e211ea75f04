// Command hello is README's first program: two softrdma devices on
// loopback, an rdma_cm connection between them, and an RDMA WRITE with
// immediate data into memory the server registered before anyone
// connected.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A device is a RoCEv2 endpoint on UDP; this one uses port 24791
	// rather than 4791 so that it runs beside other RoCE software.
	open := func(addr string) (*verbs.Device, *rdmacm.CM, error) {
		dev, err := roce.Open([]netip.Addr{netip.MustParseAddr(addr)}, &roce.Options{Port: 24791})
		if err != nil {
			return nil, nil, err
		}
		cm, err := rdmacm.New([]*verbs.Device{dev}, nil)
		if err != nil {
			dev.Close()
			return nil, nil, err
		}
		return dev, cm, nil
	}
	sdev, scm, err := open("127.0.0.2")
	if err != nil {
		return err
	}
	defer sdev.Close()
	defer scm.Close()
	cdev, ccm, err := open("127.0.0.1")
	if err != nil {
		return err
	}
	defer cdev.Close()
	defer ccm.Close()

	// The server registers a buffer peers may write, and hands its
	// address and rkey to every client in the connection's private data.
	pd, err := sdev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	key := binary.BigEndian.AppendUint64(nil, mr.Addr())
	key = binary.BigEndian.AppendUint32(key, uint32(mr.RKey()))
	l, err := rdmacm.Listen(ctx, netip.MustParseAddrPort("127.0.0.2:7471"),
		&rdmacm.ConnOptions{CM: scm, PD: pd, Param: rdmacm.ConnParam{PrivateData: key}})
	if err != nil {
		return err
	}
	defer l.Close()

	// The client connects; the listener accepts in the background.
	c, err := rdmacm.Dial(ctx, netip.MustParseAddrPort("127.0.0.2:7471"), &rdmacm.ConnOptions{CM: ccm})
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	defer s.Close()

	// The server posts a receive for the immediate data; the client
	// writes into the server's buffer.
	if err := s.QP.PostRecv([]verbs.RecvWR{{ID: 1}}); err != nil {
		return err
	}
	raddr := binary.BigEndian.Uint64(c.Peer.PrivateData)
	rkey := wire.RKey(binary.BigEndian.Uint32(c.Peer.PrivateData[8:]))
	msg := []byte("hello, RDMA")
	src, err := c.PD.RegMR(msg, 0)
	if err != nil {
		return err
	}
	defer src.Dereg()
	err = c.QP.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, len(msg))}, RemoteAddr: raddr, RKey: rkey, Imm: 42}})
	if err != nil {
		return err
	}
	wc := make([]verbs.WC, 1)
	if _, err := c.CQ.Wait(ctx, wc); err != nil {
		return err
	}
	if err := wc[0].Err(); err != nil {
		return err
	}
	if _, err := s.CQ.Wait(ctx, wc); err != nil {
		return err
	}
	if err := wc[0].Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, "server got %q (immediate %d)\n", mr.Buf()[:wc[0].ByteLen], wc[0].Imm)
	return nil
}
