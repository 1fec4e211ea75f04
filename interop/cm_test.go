//go:build interop && linux

package interop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/pcapcheck"
	"github.com/softrdma/softrdma/interop/peer"
)

// The rdma_cm ports of the tools (rping and udaddy: 7174, in the TCP and UDP
// port spaces; ucmatose: 7471).
const (
	rpingPort   = 7174
	cmatosePort = 7471
	udaddyPort  = 7174
)

// cmAddrs returns the host's and the guest's address of one family.
func cmAddrs(v6 bool) (host, guest netip.Addr) {
	if v6 {
		return peer.HostIPv6, peer.GuestIPv6
	}
	return peer.HostIPv4, peer.GuestIPv4
}

// guestCMListening returns a probe that is true once an rdma_cm ID in the
// guest listens on port (the kernel's rdma_cm resource table: "state LISTEN
// ... src-addr ADDR:PORT"). The C tools print nothing when they listen, and
// the agent returns output only at the end.
func (s *suite) guestCMListening(port int) func(context.Context) bool {
	return func(ctx context.Context) bool {
		r, err := s.p.Run(ctx, "rdma resource show cm_id")
		if err != nil || r.Status != 0 {
			return false
		}
		return cmListening(string(r.Stdout), port)
	}
}

// cmListening finds a listening ID on port in the output of "rdma resource
// show cm_id".
func cmListening(out string, port int) bool {
	suffix := ":" + strconv.Itoa(port)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		listen, bound := false, false
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case "state":
				listen = f[i+1] == "LISTEN"
			case "src-addr":
				bound = strings.HasSuffix(f[i+1], suffix)
			}
		}
		if listen && bound {
			return true
		}
	}
	return false
}

// hostRoCEBound is true once a socket in the namespace is bound to the RoCEv2
// port: the softrdma tools open their device (bind UDP 4791) and then, in
// the same goroutine with no I/O in between, create, bind and listen on
// their rdma_cm ID, microseconds before a guest client, which the agent
// starts and which first resolves the address and route, sends a REQ.
func (s *suite) hostRoCEBound(ctx context.Context) bool {
	out, _ := s.p.Command(ctx, "ss", "-Hlun", fmt.Sprintf("sport = :%d", pcapcheck.RoCEPort)).Output()
	return len(strings.TrimSpace(string(out))) > 0
}

// cmServerSide is the server side of an rdma_cm case: the softrdma command
// (role "server") or a guest tool listening on port.
func (s *suite) cmServerSide(role string, host []string, guest string, port int) side {
	if role == "server" {
		return side{Host: host, Ready: s.hostRoCEBound}
	}
	return side{Guest: guest, Ready: s.guestCMListening(port)}
}

// rpingData is the text of ping i of rping's client: "rdma-ping-I: "
// then letters from 'A'+i (modulo 'A'..'z') counting up and wrapping after
// 'z', size-1 bytes in all (the last byte of the buffer is the NUL).
func rpingData(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	c := byte(65 + i%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b[:size-1])
}

// rpingLines checks the lines of out that start with prefix: count of them,
// ping i's holding rpingData(i, size).
func rpingLines(out, prefix string, count, size int) error {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			got = append(got, rest)
		}
	}
	if len(got) != count {
		return fmt.Errorf("%d %q lines, want %d", len(got), prefix, count)
	}
	for i, g := range got {
		if want := rpingData(i, size); g != want {
			return fmt.Errorf("%q line %d: %d bytes %.40q..., want %d bytes %.40q...", prefix, i, len(g), g, len(want), want)
		}
	}
	return nil
}

// runRping runs softrdma ping in role against the guest's rping, count pings
// of size bytes. Both sides print every ping (-v): the client the text the
// server wrote back, the server the text it read. Both must be the client's
// rping pattern, ping by ping; the clients also compare (-V).
func (s *suite) runRping(t *testing.T, ctx context.Context, v6 bool, role string, count, size int, opts ...string) error {
	hostAddr, guestAddr := cmAddrs(v6)
	n, sz := strconv.Itoa(count), strconv.Itoa(size)
	extra := ""
	if len(opts) > 0 {
		extra = " " + strings.Join(opts, " ")
	}
	var server, client side
	if role == "server" {
		server = s.cmServerSide(role, append([]string{"ping", "-s", "-a", hostAddr.String(), "-C", n, "-S", sz, "-v"}, opts...), "", 0)
		client = side{Guest: fmt.Sprintf("rping -c -a %s -C %d -S %d -v -V%s", hostAddr, count, size, extra)}
	} else {
		server = s.cmServerSide(role, nil, fmt.Sprintf("rping -s -a %s -C %d -S %d -v%s", guestAddr, count, size, extra), rpingPort)
		client = side{Host: append([]string{"ping", "-c", "-a", guestAddr.String(), "-C", n, "-S", sz, "-v", "-V"}, opts...)}
	}
	so, co, err := s.pair(t, ctx, server, client)
	if err != nil {
		return err
	}
	if err := rpingLines(co.stdout, "ping data: ", count, size); err != nil {
		return fmt.Errorf("%s: %v\nstdout:\n%s", co.cmd, err, co.stdout)
	}
	if err := rpingLines(so.stdout, "server ping data: ", count, size); err != nil {
		return fmt.Errorf("%s: %v\nstdout:\n%s", so.cmd, err, so.stdout)
	}
	t.Logf("%d pings of %d bytes checked on both sides", count, size)
	return nil
}

// runRpingPersistent runs softrdma ping -s -P against two rping clients in
// the guest, one after the other: the server serves both on one listener
// and is still running after them (it is then stopped, as rping -P is with
// Ctrl-C). Over IPv4.
func (s *suite) runRpingPersistent(t *testing.T, ctx context.Context, count, size int) error {
	hostAddr, _ := cmAddrs(false)
	server := s.cmServerSide("server", []string{"ping", "-s", "-P", "-a", hostAddr.String(), "-S", strconv.Itoa(size), "-v"}, "", 0)
	t.Logf("server: %s", server)
	rs, err := s.start(ctx, server)
	if err != nil {
		return err
	}
	if err := s.listening(ctx, server, rs); err != nil {
		rs.stop()
		<-rs.done
		return err
	}
	client := fmt.Sprintf("rping -c -a %s -C %d -S %d -v -V", hostAddr, count, size)
	for i := range 2 {
		t.Logf("client %d: %s", i+1, client)
		r, err := s.guest(ctx, client)
		if err == nil {
			err = rpingLines(string(r.Stdout), "ping data: ", count, size)
		}
		if err != nil {
			rs.stop()
			o := <-rs.done
			return fmt.Errorf("client %d: %v\nserver stdout:\n%s\nstderr:\n%s", i+1, err, o.stdout, o.stderr)
		}
	}
	select {
	case o := <-rs.done:
		return fmt.Errorf("the persistent server ended after its clients: %v\nstdout:\n%s", o.failed(), o.stdout)
	case <-time.After(time.Second):
	}
	rs.stop()
	o := <-rs.done
	if n := strings.Count(o.stdout, "server ping data: rdma-ping-"); n != 2*count {
		return fmt.Errorf("server printed %d pings, want %d\nstdout:\n%s\nstderr:\n%s", n, 2*count, o.stdout, o.stderr)
	}
	t.Logf("two clients of %d pings served by one persistent server", count)
	return nil
}

// cmaCase is a ucmatose or udaddy run.
type cmaCase struct {
	tool         string // "cmatose" or "udaddy"
	conns, count int
	tos          uint8 // the client's -t, if not 0
	ackTimeout   uint8 // both sides' -a, if not 0
	migrate      bool  // both sides' -m
}

// guest is the rdma-core tool's name.
func (c cmaCase) guest() string {
	if c.tool == "cmatose" {
		return "ucmatose"
	}
	return c.tool
}

func (c cmaCase) port() int {
	if c.tool == "cmatose" {
		return cmatosePort
	}
	return udaddyPort
}

// runCMA runs softrdma cmatose or udaddy in role against the guest's
// ucmatose or udaddy: c.conns connections (or UD QPs), c.count messages of
// 100 bytes each way on each. The server binds its address (-b); the client
// names it (-s). Both must report their transfers complete and status 0.
func (s *suite) runCMA(t *testing.T, ctx context.Context, c cmaCase, v6 bool, role string) error {
	hostAddr, guestAddr := cmAddrs(v6)
	common := []string{"-c", strconv.Itoa(c.conns), "-C", strconv.Itoa(c.count)}
	if c.ackTimeout != 0 {
		common = append(common, "-a", strconv.Itoa(int(c.ackTimeout)))
	}
	if c.migrate {
		common = append(common, "-m")
	}
	args := strings.Join(common, " ")
	var clientOpts []string
	if c.tos != 0 {
		clientOpts = []string{"-t", strconv.Itoa(int(c.tos))}
	}
	cargs := strings.Join(append(append([]string(nil), common...), clientOpts...), " ")
	var server, client side
	if role == "server" {
		server = s.cmServerSide(role, append([]string{c.tool, "-b", hostAddr.String()}, common...), "", 0)
		client = side{Guest: fmt.Sprintf("%s -s %s %s", c.guest(), hostAddr, cargs)}
	} else {
		server = s.cmServerSide(role, nil, fmt.Sprintf("%s -b %s %s", c.guest(), guestAddr, args), c.port())
		client = side{Host: append(append([]string{c.tool, "-s", guestAddr.String()}, common...), clientOpts...)}
	}
	so, co, err := s.pair(t, ctx, server, client)
	if err != nil {
		return err
	}
	for _, o := range []*outcome{so, co} {
		wants := []string{"data transfers complete\n", "test complete\n", "return status 0\n"}
		if c.migrate {
			wants = append(wants, "migrating to new event channel\n")
		}
		for _, want := range wants {
			if !strings.Contains(o.stdout, want) {
				return fmt.Errorf("%s: no %q in its output\nstdout:\n%s\nstderr:\n%s", o.cmd, strings.TrimSpace(want), o.stdout, o.stderr)
			}
		}
	}
	t.Logf("client: %s", strings.Join(strings.Fields(co.stdout), " "))
	return nil
}

// cmWire checks a CM case's capture: the connection messages went both ways
// on QP1, at least one per connection (retransmissions allowed), and the
// data packets at least conns*count each way.
func cmWire(role string, conns, count int, ud bool) func(*testing.T, *pcapcheck.Report) {
	return func(t *testing.T, rep *pcapcheck.Report) {
		cli, srv := rep.SentMADs, rep.ReceivedMADs
		if role == "server" {
			cli, srv = srv, cli
		}
		var errs []error
		need := func(side string, m map[string]int, msg string) {
			if m[msg] < conns {
				errs = append(errs, fmt.Errorf("%d %s from the %s, want at least %d", m[msg], msg, side, conns))
			}
		}
		data := "RC SEND_ONLY"
		if ud {
			need("client", cli, "SIDR_REQ")
			need("server", srv, "SIDR_REP")
			data = "UD SEND_ONLY_WITH_IMMEDIATE" // udaddy sends with immediate data
		} else {
			need("client", cli, "REQ")
			need("server", srv, "REP")
			need("client", cli, "RTU")
		}
		if count > 0 {
			sent, received := rep.SentOps[data], rep.ReceivedOps[data]
			if sent < conns*count || received < conns*count {
				errs = append(errs, fmt.Errorf("%s data packets: sent %d, received %d; want at least %d each way", data, sent, received, conns*count))
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.Errorf("%v\n%s", err, rep.Summary())
		}
	}
}

// tosWire checks a type-of-service case's capture on top of cmWire: every
// REQ carries tos as its primary path's traffic class, and every packet of
// the connections (all but the MADs on QP1), softrdma's and rxe's, leaves
// with tos as its IPv4 TOS byte or IPv6 Traffic Class: the client's from
// its -t, the server's from the REQ.
func tosWire(role string, conns, count int, tos uint8) func(*testing.T, *pcapcheck.Report) {
	base := cmWire(role, conns, count, false)
	return func(t *testing.T, rep *pcapcheck.Report) {
		base(t, rep)
		for what, m := range map[string]map[uint8]int{"REQs (primary path)": rep.REQTClasses,
			"softrdma's packets": rep.SentTClasses, "rxe's packets": rep.ReceivedTClasses} {
			if len(m) != 1 || m[tos] == 0 {
				t.Errorf("%s by traffic class: %v, want all %#x\n%s", what, m, tos, rep.Summary())
			}
		}
		t.Logf("traffic classes: REQs %v, softrdma %v, rxe %v", rep.REQTClasses, rep.SentTClasses, rep.ReceivedTClasses)
	}
}

// ackTimeoutWire checks an ACK-timeout case's capture on top of cmWire:
// when softrdma is the client, its REQs announce the -a value. (The QPs'
// timeouts themselves show only when packets are lost; rxe announces a
// value derived from its -a and its ACK delay, logged here.)
func ackTimeoutWire(role string, conns, count int, timeout uint8) func(*testing.T, *pcapcheck.Report) {
	base := cmWire(role, conns, count, false)
	return func(t *testing.T, rep *pcapcheck.Report) {
		base(t, rep)
		if role == "client" && (len(rep.SentREQACKTimeouts) != 1 || rep.SentREQACKTimeouts[timeout] != conns) {
			t.Errorf("softrdma's REQs by local ACK timeout: %v, want %d of %d", rep.SentREQACKTimeouts, conns, timeout)
		}
		t.Logf("REQ local ACK timeouts: softrdma's %v, rxe's %v", rep.SentREQACKTimeouts, rep.ReceivedREQACKTimeouts)
	}
}

// perftestCMCases run perftest in rdma_cm mode (-R). perftest 4.5's -R is
// IPv4 only.
var perftestCMCases = []perftestCase{
	{test: "write_bw", name: "write_bw-R", cm: true, size: 65536, iters: 200},
	{test: "send_lat", name: "send_lat-R", cm: true, size: 2, iters: 200},
}

// cmConnections checks that a capture holds at least n rdma_cm connections
// made in one direction: REQ and RTU one way, REP the other.
func cmConnections(n int) func(*testing.T, *pcapcheck.Report) {
	return func(t *testing.T, rep *pcapcheck.Report) {
		cli, srv := rep.SentMADs, rep.ReceivedMADs
		if cli["REQ"] == 0 {
			cli, srv = srv, cli
		}
		if cli["REQ"] < n || cli["RTU"] < n || srv["REP"] < n {
			t.Errorf("want at least %d REQ and RTU one way and REP the other: %s", n, rep.Summary())
		}
	}
}

// cmMatrix runs the rdma_cm tools in both roles over IPv4 and IPv6 (rping,
// ucmatose and udaddy), and perftest's rdma_cm mode over IPv4.
func (s *suite) cmMatrix(t *testing.T) {
	const pings, pingSize = 10, 3000 // 3 packets per READ response and WRITE at MTU 1024
	cma := []cmaCase{{tool: "cmatose", conns: 2, count: 10}, {tool: "udaddy", conns: 2, count: 10}}
	for _, v6 := range []bool{false, true} {
		ipv := map[bool]string{false: "ipv4", true: "ipv6"}[v6]
		for _, role := range []string{"client", "server"} {
			s.run(t, fmt.Sprintf("rdmacm/rping/%s/softrdma-%s", ipv, role), 2*time.Minute, func(t *testing.T, ctx context.Context) error {
				return s.runRping(t, ctx, v6, role, pings, pingSize)
			}, cmWire(role, 1, 0, false))
		}
		for _, c := range cma {
			for _, role := range []string{"client", "server"} {
				s.run(t, fmt.Sprintf("rdmacm/%s/%s/softrdma-%s", c.guest(), ipv, role), 2*time.Minute, func(t *testing.T, ctx context.Context) error {
					return s.runCMA(t, ctx, c, v6, role)
				}, cmWire(role, c.conns, c.count, c.tool == "udaddy"))
			}
		}
	}
	// Type of service (-t): DSCP 46 (EF) and ECN ECT(0), so both fields
	// show on the wire.
	tos := cmaCase{tool: "cmatose", conns: 2, count: 10, tos: 0xba}
	for _, v6 := range []bool{false, true} {
		ipv := map[bool]string{false: "ipv4", true: "ipv6"}[v6]
		for _, role := range []string{"client", "server"} {
			s.run(t, fmt.Sprintf("rdmacm/cmatose-tos/%s/softrdma-%s", ipv, role), 2*time.Minute, func(t *testing.T, ctx context.Context) error {
				return s.runCMA(t, ctx, tos, v6, role)
			}, tosWire(role, tos.conns, tos.count, tos.tos))
		}
	}
	// ACK timeout (-a) on both sides.
	ack := cmaCase{tool: "cmatose", conns: 2, count: 10, ackTimeout: 16}
	for _, role := range []string{"client", "server"} {
		s.run(t, "rdmacm/cmatose-ack-timeout/ipv4/softrdma-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.runCMA(t, ctx, ack, false, role)
		}, ackTimeoutWire(role, ack.conns, ack.count, ack.ackTimeout))
	}
	// rping -q on both sides: each creates its QP with verbs and moves it
	// with rdma_init_qp_attr's attributes.
	for _, role := range []string{"client", "server"} {
		s.run(t, "rdmacm/rping-q/ipv4/softrdma-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.runRping(t, ctx, false, role, pings, pingSize, "-q")
		}, cmWire(role, 1, 0, false))
	}
	// Migration (-m) on both sides: each moves its IDs to a new event
	// channel after the data transfers and disconnects from there.
	mig := cmaCase{tool: "cmatose", conns: 2, count: 10, migrate: true}
	for _, role := range []string{"client", "server"} {
		s.run(t, "rdmacm/cmatose-migrate/ipv4/softrdma-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.runCMA(t, ctx, mig, false, role)
		}, cmWire(role, mig.conns, mig.count, false))
	}
	s.run(t, "rdmacm/rping-P/ipv4/softrdma-server", 2*time.Minute, func(t *testing.T, ctx context.Context) error {
		return s.runRpingPersistent(t, ctx, 5, pingSize)
	}, cmWire("server", 2, 0, false))
	// Two connections: the exchange's and the test QP's.
	s.perftestMatrix(t, "rdmacm/", perftestCMCases, cmConnections(2))
}
