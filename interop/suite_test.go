//go:build interop && linux

package interop

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/pcapcheck"
	"github.com/softrdma/softrdma/interop/peer"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// suite is the state shared by the cases of one run.
type suite struct {
	p   *peer.Peer
	ctx context.Context // canceled by SIGINT or SIGTERM: the cases end, the cleanups run
	bin string          // the softrdma command
	// hostFlags are added to every softrdma command line (the loss phase
	// turns UDP GSO off: see lossPhase).
	hostFlags []string
	out       string // captures and logs; kept on failure or with SOFTRDMA_INTEROP_OUT

	mu      sync.Mutex
	timings []string
	// receiveOnly names the cases where softrdma only receives
	// unacknowledged packets (a UC or UD bw server) and sends none.
	receiveOnly map[string]bool
}

// hostAddrs are the addresses softrdma sends from.
var hostAddrs = []netip.Addr{peer.HostIPv4, peer.HostIPv6}

// newSuite checks the host, boots the peer and arranges its shutdown.
func newSuite(t *testing.T) *suite {
	t.Helper()
	if err := peer.CheckHost(); err != nil {
		t.Fatalf("the interop suite needs root, /dev/net/tun and the host packages .ci/run installs: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	t.Cleanup(stop)
	s := &suite{ctx: ctx, out: os.Getenv("SOFTRDMA_INTEROP_OUT")}
	keep := s.out != ""
	if s.out == "" {
		d, err := os.MkdirTemp("", "softrdma-interop-")
		if err != nil {
			t.Fatal(err)
		}
		s.out = d
	}
	if err := os.MkdirAll(s.out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keep || t.Failed() {
			t.Logf("captures and logs are in %s", s.out)
		} else {
			os.RemoveAll(s.out)
		}
	})
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	p, err := peer.Boot(bctx, peer.Config{
		Namespace: fmt.Sprintf("srdma-interop-%d", os.Getpid()),
		WorkDir:   filepath.Join(s.out, "peer"), KeepWorkDir: true,
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("booting the Soft-RoCE peer: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("shutting down the peer: %v", err)
		}
		if _, err := os.Stat("/run/netns/" + p.Namespace()); err == nil {
			t.Errorf("netns %s still exists", p.Namespace())
		}
	})
	s.p = p
	s.record("boot", time.Since(start), "accel "+p.Accel())
	return s
}

func (s *suite) record(name string, d time.Duration, note string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timings = append(s.timings, fmt.Sprintf("%-52s %8.1fs  %s", name, d.Seconds(), note))
}

// caseFunc runs one case; the capture around it is checked afterwards.
type caseFunc func(t *testing.T, ctx context.Context) error

// run runs fn as subtest name under a capture of the tap and a time bound,
// then checks every packet softrdma sent, and calls each post with the
// capture's report.
func (s *suite) run(t *testing.T, name string, limit time.Duration, fn caseFunc, post ...func(*testing.T, *pcapcheck.Report)) {
	t.Run(name, func(t *testing.T) {
		start := time.Now()
		result := "FAIL"
		defer func() {
			if !t.Failed() {
				result = "ok"
			}
			s.record(name, time.Since(start), result)
		}()
		// Leave time for the cleanups before go test's -timeout panics
		// (which would skip them).
		if dl, ok := t.Deadline(); ok {
			left := time.Until(dl) - 90*time.Second
			if left <= 0 {
				t.Fatal("not run: go test's -timeout leaves no time (run with -timeout 40m)")
			}
			limit = min(limit, left)
		}
		if s.ctx.Err() != nil {
			t.Fatal("not run: the suite was interrupted")
		}
		ctx, cancel := context.WithTimeout(s.ctx, limit)
		defer cancel()
		file := filepath.Join(s.out, strings.NewReplacer("/", "_", " ", "_").Replace(name)+".pcap")
		capt, err := s.p.StartCapture(ctx, file)
		if err != nil {
			t.Fatal(err)
		}
		ferr := fn(t, ctx)
		st, serr := capt.Stop()
		if ferr != nil {
			t.Error(ferr)
		}
		if serr != nil {
			t.Fatal(serr)
		}
		if st.DroppedByKernel != 0 {
			t.Errorf("tcpdump lost %d of %d frames: the capture is incomplete", st.DroppedByKernel, st.Captured)
		}
		rep, err := pcapcheck.Check(file, hostAddrs)
		if err != nil {
			t.Fatal(err)
		}
		if err := pcapcheck.Tshark(file, hostAddrs, rep); err != nil {
			t.Fatal(err)
		}
		t.Logf("capture %s (tcpdump: %d captured, %d dropped): %s", filepath.Base(file), st.Captured, st.DroppedByKernel, rep.Summary())
		if err := rep.Err(); err != nil {
			t.Error(err)
		}
		// rxe's own packets must verify too, or the checker is wrong.
		if len(rep.ReceivedProblems) > 0 {
			t.Errorf("the peer's packets fail the check (checker or capture bug?):\n%s", strings.Join(rep.ReceivedProblems, "\n"))
		}
		switch {
		case s.receiveOnly[name]:
			if ferr == nil && rep.Received == 0 {
				t.Error("softrdma received no RoCE packets in this case")
			}
		case ferr == nil && rep.Sent == 0:
			t.Error("softrdma sent no RoCE packets in this case")
		}
		for _, f := range post {
			f(t, rep)
		}
		if t.Failed() {
			s.guestDiagnostics(t)
		}
	})
}

// guest runs cmd in the guest and requires exit status 0.
func (s *suite) guest(ctx context.Context, cmd string) (*peer.Result, error) {
	r, err := s.p.Run(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if err := peer.Failed(r); err != nil {
		return r, fmt.Errorf("guest %q: %w\nstdout:\n%s", cmd, err, r.Stdout)
	}
	return r, nil
}

// TestInterop is the whole suite: one peer, booted once, and every case
// against it; see README.md for the matrix.
func TestInterop(t *testing.T) {
	suiteStart := time.Now()
	s := newSuite(t)
	defer func() {
		s.record("total", time.Since(suiteStart), "")
		t.Logf("timings:\n%s", strings.Join(s.timings, "\n"))
	}()

	t.Run("peer", func(t *testing.T) { testPeer(t, s) })
	for _, g := range []struct {
		name  string
		local netip.Addr
		gid   int
	}{{"ipv4", peer.HostIPv4, 1}, {"ipv6", peer.HostIPv6, 2}} {
		s.run(t, "verbs-client/rc_pingpong/"+g.name, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.verbsClient(t, ctx, g.local, g.gid)
		})
	}
	s.bin = buildSoftrdma(t, s.out)
	for _, c := range []string{"pingpong", "perf", "ping", "cmatose", "udaddy", "mckey"} {
		if !hasCommand(s.bin, c) {
			t.Fatalf("%s lacks the %s command", s.bin, c)
		}
	}

	// Path MTU 1024 (netdev MTU 1500).
	s.pingpongMatrix(t, "", 0)
	s.capiMatrix(t)
	s.pingpongTimestamps(t)
	s.perftestMatrix(t, "", perftestCases)
	s.cmMatrix(t)
	s.mckeyMatrix(t)

	// Path MTU 4096: tap and guest eth0 at 4200; rxe follows the netdev.
	t.Run("mtu4096", func(t *testing.T) { s.setMTU(t, 4200, 4096) })
	// 4096-byte payloads: both ways for pingpong, the data direction for
	// the bandwidth tests.
	want := wire.BTHLen + 4096 + wire.ICRCLen
	bigBoth := func(t *testing.T, rep *pcapcheck.Report) {
		if rep.SentMaxLen < want || rep.ReceivedMaxLen < want {
			t.Errorf("largest packets: sent %d B, received %d B; want at least %d both ways", rep.SentMaxLen, rep.ReceivedMaxLen, want)
		}
	}
	big := func(t *testing.T, rep *pcapcheck.Report) {
		if max(rep.SentMaxLen, rep.ReceivedMaxLen) < want {
			t.Errorf("largest packets: sent %d B, received %d B; want at least %d", rep.SentMaxLen, rep.ReceivedMaxLen, want)
		}
	}
	for _, role := range []string{"client", "server"} {
		c := pingpongCase{typ: "rc", size: 16384, iters: 20, mtu: 4096}
		s.run(t, "mtu4096/pingpong/rc/softrdma-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.runPingpong(t, ctx, c, role, 1)
		}, bigBoth)
	}
	s.perftestMatrix(t, "mtu4096/", []perftestCase{
		{test: "write_bw", size: 65536, iters: 200},
		{test: "read_bw", size: 65536, iters: 200},
		{test: "send_bw", size: 65536, iters: 200},
	}, big)
	t.Run("mtu1024", func(t *testing.T) { s.setMTU(t, 1500, 1024) })

	// Loss: nftables in the namespace drops RoCE packets at random, one in lossEvery,
	// in each direction, so both sides retransmit and NAK.
	s.lossPhase(t)
}

// markReceiveOnly records that softrdma only receives in case name, so its
// capture rightly holds no RoCE packet of its own; the case must then have
// received some.
func (s *suite) markReceiveOnly(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.receiveOnly == nil {
		s.receiveOnly = map[string]bool{}
	}
	s.receiveOnly[name] = true
}

// perftestMatrix runs every case with softrdma as client and as server.
func (s *suite) perftestMatrix(t *testing.T, prefix string, cases []perftestCase, post ...func(*testing.T, *pcapcheck.Report)) {
	for _, c := range cases {
		name := c.name
		if name == "" {
			name = c.test
		}
		for _, role := range []string{"client", "server"} {
			full := fmt.Sprintf("%sperftest/%s/softrdma-%s", prefix, name, role)
			if c.unreliable && role == "server" && c.test != "send_lat" {
				s.markReceiveOnly(full)
			}
			s.run(t, full, 3*time.Minute, func(t *testing.T, ctx context.Context) error {
				return s.runPerftest(t, ctx, c, role)
			}, post...)
		}
	}
}

// pingpongMatrix runs every pingpong type in both roles over the IPv4 and
// the IPv6 GID.
func (s *suite) pingpongMatrix(t *testing.T, prefix string, mtu int) {
	for _, typ := range []string{"rc", "uc", "ud", "srq"} {
		size := 4096 // several packets per message at MTU 1024
		if typ == "ud" {
			size = 512 // one packet, below the MTU
		}
		for _, gid := range []int{1, 2} {
			ipv := map[int]string{1: "ipv4", 2: "ipv6"}[gid]
			for _, role := range []string{"client", "server"} {
				c := pingpongCase{typ: typ, size: size, iters: 20, mtu: mtu}
				s.run(t, fmt.Sprintf("%spingpong/%s/%s/softrdma-%s", prefix, typ, ipv, role), 2*time.Minute, func(t *testing.T, ctx context.Context) error {
					return s.runPingpong(t, ctx, c, role, gid)
				})
			}
		}
	}
}

// pingpongTimestamps runs softrdma's rc pingpong -t against
// ibv_rc_pingpong in both roles (-t is local: the C side runs without it),
// and checks that the C tool refuses -t on rxe, which has no completion
// timestamps: a -t run between the C tool and softrdma cannot happen here.
func (s *suite) pingpongTimestamps(t *testing.T) {
	for _, role := range []string{"client", "server"} {
		c := pingpongCase{typ: "rc", size: 4096, iters: 20, hostExtra: []string{"-t"}}
		s.run(t, "pingpong/rc-ts/softrdma-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			return s.runPingpong(t, ctx, c, role, 1)
		})
	}
	t.Run("pingpong/rc-ts/rxe-refuses", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		defer cancel()
		r, err := s.p.Run(ctx, "ibv_rc_pingpong -d rxe0 -g 1 -t -p 18999")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == 0 || !strings.Contains(string(r.Stderr), "isn't completion timestamp capable") {
			t.Errorf("ibv_rc_pingpong -t on rxe0: status %d, stderr %q; want a refusal", r.Status, r.Stderr)
		}
	})
}

// guestDiagnostics logs rxe0's counters and eth0's statistics in the guest,
// to tell losses inside the guest (ring overflows, rxe drops) from the wire.
func (s *suite) guestDiagnostics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.p.Run(ctx, "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -v '^0$' * | grep -v ':0$'; /usr/sbin/ip -s link show eth0")
	if err != nil {
		t.Logf("guest diagnostics: %v", err)
		return
	}
	t.Logf("guest rxe0 counters (non-zero) and eth0 statistics since boot:\n%s%s", r.Stdout, r.Stderr)
}

// setMTU sets the link MTU and checks rxe's active MTU.
func (s *suite) setMTU(t *testing.T, netdev, active int) {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	if err := s.p.SetMTU(ctx, netdev); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("active_mtu:\t\t%d", active)
	for {
		r, err := s.guest(ctx, "ibv_devinfo -d rxe0")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(r.Stdout), want) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("rxe0 did not reach %s:\n%s", want, r.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testPeer checks the guest: the agent's exit statuses and timeouts, and
// rxe0's state and GID table.
func testPeer(t *testing.T, s *suite) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.p.Run(ctx, "echo out; echo err >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 3 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" {
		t.Errorf("agent: status %d stdout %q stderr %q, want 3 \"out\\n\" \"err\\n\"", r.Status, r.Stdout, r.Stderr)
	}
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
	r, err = s.p.Run(tctx, "sleep 30 & sleep 31; echo never")
	tcancel()
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut || r.Elapsed > 10*time.Second {
		t.Errorf("agent: a 2 s bound gave timed out %v after %v", r.TimedOut, r.Elapsed)
	}
	if r, err := s.guest(ctx, "pgrep -f 'sleep 3[01]' || true"); err != nil || len(strings.TrimSpace(string(r.Stdout))) != 0 {
		t.Errorf("agent: processes of the timed-out group survive: %v %q", err, r.Stdout)
	}
	r, err = s.guest(ctx, "ibv_devinfo -v -d rxe0")
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Stdout)
	for _, want := range []string{"PORT_ACTIVE", "active_mtu:\t\t1024", "::ffff:198.18.0.2, RoCE v2", "fd00:198:18::2, RoCE v2"} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo lacks %q:\n%s", want, out)
		}
	}
	// Memory windows: softrdma advertises max_mw and the window capability
	// flags as rxe does.
	if want := fmt.Sprintf("max_mw:\t\t\t\t%d\n", verbs.MaxMW); !strings.Contains(out, want) {
		t.Errorf("ibv_devinfo lacks %q (verbs.MaxMW):\n%s", want, out)
	}
	if _, rest, ok := strings.Cut(out, "device_cap_flags:"); !ok {
		t.Errorf("ibv_devinfo -v shows no device_cap_flags:\n%s", out)
	} else if flags, err := strconv.ParseUint(strings.TrimPrefix(strings.Fields(rest)[0], "0x"), 16, 64); err != nil {
		t.Errorf("device_cap_flags %q: %v", strings.Fields(rest)[0], err)
	} else if w := verbs.DeviceMemWindow | verbs.DeviceMemMgtExtensions | verbs.DeviceMemWindowType2B; verbs.DeviceCap(flags)&w != w {
		t.Errorf("rxe0's device_cap_flags %#x lack softrdma's window flags %#x", flags, w)
	}
	// rxe derives its node GUID from the MAC address as roce does.
	mr, err := s.guest(ctx, "cat /sys/class/net/eth0/address")
	if err != nil {
		t.Fatal(err)
	}
	if mac, err := net.ParseMAC(strings.TrimSpace(string(mr.Stdout))); err != nil {
		t.Errorf("guest eth0 address %q: %v", mr.Stdout, err)
	} else {
		g := roce.NodeGUIDFromMAC(mac)
		want := fmt.Sprintf("node_guid:			%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
		if !strings.Contains(out, want) {
			t.Errorf("rxe0 on MAC %s: ibv_devinfo lacks %q, roce.NodeGUIDFromMAC's:\n%s", mac, want, out)
		}
	}
	st, err := s.p.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GIDs) < 3 || st.GIDs[1] != "0000:0000:0000:0000:0000:ffff:c612:0002" || st.GIDs[2] != "fd00:0198:0018:0000:0000:0000:0000:0002" {
		t.Errorf("rxe0 GIDs %q: want IPv4 at 1 and IPv6 at 2", st.GIDs)
	}
}
