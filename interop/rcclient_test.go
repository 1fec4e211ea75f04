//go:build interop && linux

package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// rcPingpongClient is a minimal ibv_rc_pingpong client written on the verbs
// API: it proves the peer, the namespace and the capture without the
// softrdma command. It opens a device on local in the peer's namespace,
// exchanges QP numbers with the guest's ibv_rc_pingpong server over TCP
// 18515, then sends and receives iters messages of size bytes and checks
// each received message's length and bytes against fill.
func rcPingpongClient(ctx context.Context, p *peer.Peer, local, server netip.Addr, size, iters int, fill byte) error {
	var dev *verbs.Device
	var conn net.Conn
	err := p.Do(func() error {
		var err error
		dev, err = roce.Open([]netip.Addr{local}, nil)
		if err != nil {
			return err
		}
		var d net.Dialer
		// The server listens on IPv4 only; -g picks the RoCE address.
		conn, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(peer.GuestIPv4, 18515).String())
		return err
	})
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		return err
	}
	defer dev.Close()
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	const depth = 16
	cq, err := dev.CreateCQ(2*depth, nil)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	sbuf, rbuf := bytes.Repeat([]byte{fill}, size), make([]byte, depth*size)
	smr, err := pd.RegMR(sbuf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	rmr, err := pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.StateInit, PortNum: 1},
		verbs.AttrState|verbs.AttrPort|verbs.AttrPKeyIndex|verbs.AttrAccessFlags); err != nil {
		return err
	}
	for i := range depth {
		if err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*size, size)}}}); err != nil {
			return err
		}
	}
	// "LID:QPN:PSN:GID", the GID as its 16 bytes in hex, NUL-terminated.
	psn := rand.Uint32N(1 << 24)
	gid := wire.GIDFromAddr(local)
	msg := fmt.Sprintf("%04x:%06x:%06x:%s\x00", 0, qp.QPN(), psn, hex.EncodeToString(gid[:]))
	if _, err := io.WriteString(conn, msg); err != nil {
		return err
	}
	reply := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, reply); err != nil {
		return fmt.Errorf("server's QP info: %w", err)
	}
	var lid, rqpn, rpsn uint32
	var rgidHex string
	if _, err := fmt.Sscanf(string(bytes.TrimRight(reply, "\x00")), "%x:%x:%x:%s", &lid, &rqpn, &rpsn, &rgidHex); err != nil {
		return fmt.Errorf("server's QP info %q: %w", reply, err)
	}
	rgidBytes, err := hex.DecodeString(rgidHex)
	if err != nil || len(rgidBytes) != 16 {
		return fmt.Errorf("server's GID %q", rgidHex)
	}
	if _, err := io.WriteString(conn, "done\x00"); err != nil {
		return err
	}
	port, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{DGID: wire.GID(rgidBytes), PortNum: 1},
		PathMTU: port.ActiveMTU, DestQPN: wire.QPN(rqpn), RQPSN: wire.PSN(rpsn), MaxDestRdAtomic: 1, MinRNRTimer: 12},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	if err != nil {
		return err
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: wire.PSN(psn), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	if err != nil {
		return err
	}
	// The ping-pong: a send goes out once the previous send completed and
	// the previous message from the server arrived.
	const sendID = 1 << 32
	post := func() error {
		return qp.PostSend([]verbs.SendWR{{ID: sendID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, size)}}})
	}
	if err := post(); err != nil {
		return err
	}
	sent, recvd, pendingSend, pendingRecv := 1, 0, true, true
	wcs := make([]verbs.WC, 8)
	for recvd < iters || sent < iters || pendingSend {
		if ctx.Err() != nil {
			return fmt.Errorf("after %d sends and %d receives: %w", sent, recvd, ctx.Err())
		}
		n := cq.Poll(wcs)
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.Success {
				return fmt.Errorf("completion %+v", wc)
			}
			if wc.WRID == sendID {
				pendingSend = false
			} else {
				i := int(wc.WRID)
				got := rbuf[i*size : i*size+int(wc.ByteLen)]
				if int(wc.ByteLen) != size || !bytes.Equal(got, sbuf[:len(got)]) {
					return fmt.Errorf("message %d: %d bytes, want %d bytes of %#x", recvd, wc.ByteLen, size, fill)
				}
				clear(got)
				recvd++
				pendingRecv = false
				if err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*size, size)}}}); err != nil {
					return err
				}
			}
		}
		if !pendingSend && !pendingRecv && sent < iters {
			if err := post(); err != nil {
				return err
			}
			sent++
			pendingSend, pendingRecv = true, true
		}
	}
	return nil
}

// verbsClient runs the guest's ibv_rc_pingpong as server against
// rcPingpongClient over GID index gid (local is the matching host address).
func (s *suite) verbsClient(t *testing.T, ctx context.Context, local netip.Addr, gid int) error {
	const size, iters = 4096, 20
	srv, err := s.p.Start(ctx, fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -s %d -n %d", gid, size, iters))
	if err != nil {
		return err
	}
	if err := s.listening(ctx, side{Guest: "ibv_rc_pingpong"}, nil); err != nil {
		srv.Stop()
		return err
	}
	if err := rcPingpongClient(ctx, s.p, local, peer.GuestIPv4, size, iters, 0xa5); err != nil {
		srv.Stop()
		return fmt.Errorf("softrdma verbs client: %w", err)
	}
	r, err := srv.Wait()
	if err != nil {
		return err
	}
	if err := peer.Failed(r); err != nil {
		return fmt.Errorf("ibv_rc_pingpong server: %w\n%s", err, r.Stdout)
	}
	if err := pingpongReport(string(r.Stdout), size, iters); err != nil {
		return fmt.Errorf("ibv_rc_pingpong server: %w\n%s", err, r.Stdout)
	}
	t.Logf("guest server: %s", strings.Join(strings.Fields(lastLines(string(r.Stdout), 2)), " "))
	return nil
}
