//go:build interop && linux

package interop

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/pcapcheck"
)

// mckeyGroup is the IPv4 group the mckey cases join. Linux's rdma_cm joins
// RoCEv2 groups for IPv4 only (cma_iboe_join_multicast refuses IPv6 ones
// with EOPNOTSUPP), so there is no IPv6 case.
var mckeyGroup = netip.MustParseAddr("239.18.0.47")

// mckey's message count and the receiver's QPs (-c): each of them must get
// every message, one copy per attached QP.
const mckeyCount, mckeyRecvQPs = 10, 2

// guestJoined returns a probe that is true once the guest's eth0 is a
// member of group: rdma_cm's join, which mckey makes before it waits for
// messages, joins it (ip_mc_inc_group), and /proc/net/igmp lists it as the
// address's 32 bits in host (little-endian) order, in hex. (The guest's
// plain shell has busybox's ip, without maddr.)
func (s *suite) guestJoined(group netip.Addr) func(context.Context) bool {
	b := group.As4()
	want := fmt.Sprintf("%02X%02X%02X%02X", b[3], b[2], b[1], b[0])
	return func(ctx context.Context) bool {
		r, err := s.p.Run(ctx, "cat /proc/net/igmp")
		if err != nil || r.Status != 0 {
			return false
		}
		for _, l := range strings.Split(string(r.Stdout), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == want {
				return true
			}
		}
		return false
	}
}

// runMckey runs softrdma mckey in role ("sender" or "receiver") against the
// guest's mckey in the other: the receiver (the server side, started first)
// joins with mckeyRecvQPs QPs, the sender with one sends mckeyCount
// messages of 100 bytes to the group after mckey's 3-second pause. Both
// must report their transfers complete and status 0; the receiver gets
// every message on each QP (it polls for them all).
func (s *suite) runMckey(t *testing.T, ctx context.Context, role string) error {
	hostAddr, guestAddr := cmAddrs(false)
	g := mckeyGroup.String()
	// rxe sends to a group by the IP route to it; the guest has routes for
	// its subnet only.
	if r, err := s.p.Run(ctx, "ip route replace 224.0.0.0/4 dev eth0"); err != nil || r.Status != 0 {
		return fmt.Errorf("guest multicast route: %v %s", err, r.Stderr)
	}
	count := strconv.Itoa(mckeyCount)
	var server, client side
	if role == "receiver" {
		server = side{Host: []string{"mckey", "-m", g, "-b", hostAddr.String(), "-c", strconv.Itoa(mckeyRecvQPs), "-C", count, "--timeout", "60s"},
			Ready: s.hostRoCEBound}
		client = side{Guest: fmt.Sprintf("mckey -m %s -s -b %s -C %s", g, guestAddr, count)}
	} else {
		server = side{Guest: fmt.Sprintf("mckey -m %s -b %s -c %d -C %s", g, guestAddr, mckeyRecvQPs, count),
			Ready: s.guestJoined(mckeyGroup)}
		client = side{Host: []string{"mckey", "-m", g, "-s", "-b", hostAddr.String(), "-C", count}}
	}
	so, co, err := s.pair(t, ctx, server, client)
	if err != nil {
		if so != nil {
			err = fmt.Errorf("%w\nserver stdout:\n%s\nserver stderr:\n%s", err, so.stdout, so.stderr)
		}
		if role == "sender" {
			for _, cmd := range []string{"cat /proc/net/igmp", "ip route"} {
				if r, rerr := s.p.Run(context.Background(), cmd); rerr == nil {
					t.Logf("guest %s:\n%s%s", cmd, r.Stdout, r.Stderr)
				}
			}
		}
		return err
	}
	joined := "mckey: joined dgid: ::ffff:" + g + " mlid 0x0 sl 0\n"
	for _, c := range []struct {
		o     *outcome
		want  []string
		joins int
	}{
		{so, []string{"mckey: starting server\n", "receiving data transfers\n"}, mckeyRecvQPs},
		{co, []string{"mckey: starting client\n", "initiating data transfers\n"}, 1},
	} {
		for _, want := range append(c.want, "mckey: joining\n", "data transfers complete\n", "test complete\n", "return status 0\n") {
			if !strings.Contains(c.o.stdout, want) {
				return fmt.Errorf("%s: no %q in its output\nstdout:\n%s\nstderr:\n%s", c.o.cmd, strings.TrimSpace(want), c.o.stdout, c.o.stderr)
			}
		}
		if n := strings.Count(c.o.stdout, joined); n != c.joins {
			return fmt.Errorf("%s: %d lines %q, want %d\nstdout:\n%s", c.o.cmd, n, strings.TrimSpace(joined), c.joins, c.o.stdout)
		}
	}
	t.Logf("receiver: %s", strings.Join(strings.Fields(so.stdout), " "))
	return nil
}

// mckeyWire checks an mckey case's capture: the sender's datagrams went to
// the group, mckeyCount of them (one per message, however many QPs
// receive), SEND with immediate to QP 0xFFFFFF.
func mckeyWire(role string) func(*testing.T, *pcapcheck.Report) {
	return func(t *testing.T, rep *pcapcheck.Report) {
		const op = "UD SEND_ONLY_WITH_IMMEDIATE"
		got := rep.SentOps[op]
		if role == "receiver" {
			got = rep.ReceivedOps[op]
		}
		if got < mckeyCount {
			t.Errorf("%d %s packets from the sender, want %d\n%s", got, op, mckeyCount, rep.Summary())
		}
	}
}

// mckeyMatrix runs mckey with softrdma as the sender and as the receiver,
// over IPv4.
func (s *suite) mckeyMatrix(t *testing.T) {
	// mckey's receiver sends no RoCE packet (its joins are IGMP).
	s.markReceiveOnly("rdmacm/mckey/ipv4/softrdma-receiver")
	for _, role := range []string{"sender", "receiver"} {
		s.run(t, "rdmacm/mckey/ipv4/softrdma-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.runMckey(t, ctx, role)
		}, mckeyWire(role))
	}
}
