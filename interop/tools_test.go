//go:build interop && linux

package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer"
)

// exchangePort is the TCP port of the pingpong and perftest exchanges.
const exchangePort = 18515

// buildSoftrdma builds the softrdma command once for the whole suite, or
// uses $SOFTRDMA_INTEROP_BIN (a build to test, e.g. from another branch).
func buildSoftrdma(t *testing.T, dir string) string {
	t.Helper()
	if bin := os.Getenv("SOFTRDMA_INTEROP_BIN"); bin != "" {
		t.Logf("softrdma command: %s (SOFTRDMA_INTEROP_BIN)", bin)
		return bin
	}
	bin := filepath.Join(dir, "softrdma")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/softrdma/softrdma/cmd/softrdma").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/softrdma: %v\n%s", err, out)
	}
	return bin
}

// hasCommand reports whether the softrdma binary knows a subcommand.
func hasCommand(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// side is one end of a two-party case: the softrdma command on the host
// (Host set) or a tool in the guest (Guest set).
type side struct {
	Host  []string // softrdma arguments
	Guest string   // guest shell command
	// Exec is another host command (its path and arguments), run with Env
	// added to the environment: a C program on capi's libibverbs.
	Exec []string
	Env  []string
	// Ready reports whether a server side accepts clients; nil: it
	// listens on the TCP exchange port.
	Ready func(ctx context.Context) bool
}

func (sd side) String() string {
	if sd.Host != nil {
		return "softrdma " + strings.Join(sd.Host, " ")
	}
	if sd.Exec != nil {
		return strings.Join(append(append([]string(nil), sd.Env...), sd.Exec...), " ")
	}
	return sd.Guest
}

// outcome is how one side ended.
type outcome struct {
	cmd            string
	status         int
	stdout, stderr string
	err            error // could not run, timed out
	elapsed        time.Duration
}

func (o *outcome) failed() error {
	switch {
	case o.err != nil:
		return fmt.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", o.cmd, o.err, o.stdout, o.stderr)
	case o.status != 0:
		return fmt.Errorf("%s: exit status %d\nstdout:\n%s\nstderr:\n%s", o.cmd, o.status, o.stdout, o.stderr)
	}
	return nil
}

// running is a started side.
type running struct {
	done chan *outcome
	stop func()
}

func (s *suite) start(ctx context.Context, sd side) (*running, error) {
	r := &running{done: make(chan *outcome, 1)}
	begin := time.Now()
	if sd.Host != nil || sd.Exec != nil {
		var cmd *exec.Cmd
		if sd.Exec != nil {
			cmd = s.p.Command(ctx, sd.Exec[0], sd.Exec[1:]...)
			cmd.Env = append(os.Environ(), sd.Env...)
		} else {
			cmd = s.p.Command(ctx, s.bin, append(append([]string(nil), sd.Host...), s.hostFlags...)...)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		r.stop = func() { _ = cmd.Process.Kill() }
		go func() {
			err := cmd.Wait()
			o := &outcome{cmd: sd.String(), stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(begin)}
			var ee *exec.ExitError
			switch {
			case ctx.Err() != nil:
				o.err = fmt.Errorf("killed: %w", ctx.Err())
			case errors.As(err, &ee):
				o.status = ee.ExitCode()
			case err != nil:
				o.err = err
			}
			r.done <- o
		}()
		return r, nil
	}
	pr, err := s.p.Start(ctx, sd.Guest)
	if err != nil {
		return nil, err
	}
	r.stop = func() { go pr.Stop() }
	go func() {
		res, err := pr.Wait()
		o := &outcome{cmd: sd.String(), err: err, elapsed: time.Since(begin)}
		if res != nil {
			o.status, o.stdout, o.stderr = res.Status, string(res.Stdout), string(res.Stderr)
			if res.TimedOut {
				o.err = errors.New("timed out in the guest")
			} else if res.Stopped {
				o.err = errors.New("stopped")
			} else if res.Err != "" {
				o.err = errors.New(res.Err)
			}
		}
		r.done <- o
	}()
	return r, nil
}

// listening waits until the server side is ready: by default, until it
// listens on the exchange port.
func (s *suite) listening(ctx context.Context, server side, r *running) error {
	for {
		var ok bool
		switch {
		case server.Ready != nil:
			ok = server.Ready(ctx)
		case server.Host != nil || server.Exec != nil:
			out, _ := s.p.Command(ctx, "ss", "-Hltn", fmt.Sprintf("sport = :%d", exchangePort)).Output()
			ok = len(bytes.TrimSpace(out)) > 0
		default:
			res, err := s.p.Run(ctx, fmt.Sprintf("netstat -ltn | grep -q ':%d '", exchangePort))
			ok = err == nil && res.Status == 0
		}
		if ok {
			return nil
		}
		var ended chan *outcome
		if r != nil {
			ended = r.done
		}
		select {
		case o := <-ended:
			r.done <- o
			return fmt.Errorf("server ended before listening: %v", o.failed())
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pair runs server, waits for it to listen, runs client, and returns both
// outcomes. If one side fails the other is stopped.
func (s *suite) pair(t *testing.T, ctx context.Context, server, client side) (srv, cli *outcome, err error) {
	t.Logf("server: %s", server)
	t.Logf("client: %s", client)
	rs, err := s.start(ctx, server)
	if err != nil {
		return nil, nil, err
	}
	if err := s.listening(ctx, server, rs); err != nil {
		rs.stop()
		o := <-rs.done
		return o, nil, err
	}
	rc, err := s.start(ctx, client)
	if err != nil {
		rs.stop()
		<-rs.done
		return nil, nil, err
	}
	var so, co *outcome
	for so == nil || co == nil {
		select {
		case so = <-rs.done:
			if so.failed() != nil && co == nil {
				rc.stop()
			}
		case co = <-rc.done:
			if co.failed() != nil && so == nil {
				rs.stop()
			}
		}
	}
	t.Logf("server %v, client %v", so.elapsed.Round(time.Millisecond), co.elapsed.Round(time.Millisecond))
	return so, co, errors.Join(so.failed(), co.failed())
}

// perftestCase is one perftest benchmark.
type perftestCase struct {
	test  string // write_bw, ...
	extra []string
	name  string
	size  int
	iters int
	gid   int // -x; 0 means 1 (IPv4)
	// cm is -R: the exchange and the test QPs' connections go over rdma_cm
	// (port exchangePort), which picks the GID: no -x.
	cm bool
	// lossy: the link drops packets (the loss phase), so what one side
	// sent is not what the other received.
	lossy bool
	// number: --output, each side that reports prints one number.
	number bool
	// unreliable: UC or UD, nothing retransmits what the emulated guest
	// fails to take, and a bw server sends nothing.
	unreliable bool
}

// perftestCases is the perftest part of the matrix; few iterations, since
// the guest is emulated.
var perftestCases = []perftestCase{
	{test: "write_bw", size: 65536, iters: 200},
	{test: "read_bw", size: 65536, iters: 200},
	{test: "send_bw", size: 65536, iters: 200},
	{test: "atomic_bw", name: "atomic_bw-CAS", extra: []string{"-A", "CMP_AND_SWAP"}, size: 8, iters: 500},
	{test: "atomic_bw", name: "atomic_bw-FAA", extra: []string{"-A", "FETCH_AND_ADD"}, size: 8, iters: 500},
	{test: "write_lat", size: 2, iters: 200},
	{test: "read_lat", size: 2, iters: 200},
	{test: "send_lat", size: 2, iters: 200},
	{test: "write_bw", name: "write_bw-ipv6", size: 65536, iters: 200, gid: 2},
	{test: "send_lat", name: "send_lat-ipv6", size: 2, iters: 200, gid: 2},
	// -c, -l and --output (issue 12): rxe runs UC and UD.
	{test: "send_bw", name: "send_bw-UD", extra: []string{"-c", "UD"}, size: 1024, iters: 200, unreliable: true},
	{test: "send_lat", name: "send_lat-UD", extra: []string{"-c", "UD"}, size: 2, iters: 200, unreliable: true},
	{test: "write_bw", name: "write_bw-UC", extra: []string{"-c", "UC"}, size: 4096, iters: 200, unreliable: true},
	{test: "send_bw", name: "send_bw-l4", extra: []string{"-l", "4"}, size: 4096, iters: 200},
	{test: "write_bw", name: "write_bw-b", extra: []string{"-b"}, size: 65536, iters: 200},
	{test: "write_bw", name: "write_bw-output", extra: []string{"--output=bandwidth"}, size: 4096, iters: 200, number: true},
}

// runPerftest runs one perftest case with softrdma in role ("server" or
// "client") and the guest's ib_TEST as the other side, and checks both
// reports. The exchange runs over IPv4; -x picks the RoCE GID.
func (s *suite) runPerftest(t *testing.T, ctx context.Context, c perftestCase, role string) error {
	common := []string{"-x", strconv.Itoa(max(c.gid, 1))}
	if c.cm {
		common = []string{"-R"}
	}
	common = append(append(common, "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters)), c.extra...)
	host := append([]string{"perf", c.test, "-d", s.p.Tap(), "--stats"}, common...)
	guest := "ib_" + c.test + " -d rxe0 -F " + strings.Join(common, " ")
	var server, client side
	if role == "server" {
		server, client = side{Host: host}, side{Guest: guest + " " + peer.HostIPv4.String()}
	} else {
		server, client = side{Guest: guest}, side{Host: append(host, peer.GuestIPv4.String())}
	}
	if c.cm {
		server = s.cmServerSide(role, server.Host, server.Guest, exchangePort)
	}
	// rxe's counters around the run: what rxe0 received and sent is what
	// softrdma sent and received (the tap loses nothing), and its
	// completed SENDs and receives are softrdma's receives and SENDs
	// (rxe's counters are the device's; nothing else uses it meanwhile).
	// With loss (the loss phase, or a retransmission anywhere), only the
	// completed work requests must agree. With
	// rdma_cm, the connection's MADs count on both sides, and its
	// teardown can fall after softrdma's report: no comparison.
	before, err := s.rxeCounters(ctx)
	if err != nil {
		return err
	}
	so, co, err := s.pair(t, ctx, server, client)
	if err != nil {
		return err
	}
	after, err := s.rxeCounters(ctx)
	if err != nil {
		return err
	}
	mine := so
	if role == "client" {
		mine = co
	}
	soft, err := softCounters(mine.stdout)
	if err != nil {
		return fmt.Errorf("%s: %v\nstdout:\n%s", mine.cmd, err, mine.stdout)
	}
	pairs := [][2]string{{"sent_pkts", "rcvd_pkts"}, {"rcvd_pkts", "sent_pkts"}, {"rdma_sends", "rdma_recvs"}, {"rdma_recvs", "rdma_sends"}}
	// A packet lost anyway (a guest too slow to take it, under emulation)
	// shows as a retransmission on one side or the other.
	lost := false
	for _, k := range []string{"completer_retry_err", "rcvd_seq_err", "duplicate_request", "out_of_seq_request"} {
		lost = lost || soft[k] > 0 || after[k] != before[k]
	}
	switch {
	case c.cm:
		pairs = nil
	case c.lossy || lost || c.unreliable:
		pairs = pairs[2:]
	}
	for _, c := range pairs {
		if d := after[c[1]] - before[c[1]]; soft[c[0]] != d {
			return fmt.Errorf("softrdma's %s is %d, rxe0's %s grew by %d (rxe0 %v -> %v; softrdma %v)", c[0], soft[c[0]], c[1], d, before, after, soft)
		}
	}
	if len(pairs) > 0 {
		t.Logf("counters agree with rxe0's (%v): softrdma sent %d packets, received %d; SENDs %d, receives %d",
			pairs, soft["sent_pkts"], soft["rcvd_pkts"], soft["rdma_sends"], soft["rdma_recvs"])
	}
	checked := []*outcome{so, co}
	if c.test == "read_lat" || c.test == "atomic_lat" {
		// perftest's server is passive in these and prints no result.
		checked = checked[1:]
	}
	if c.number {
		return outputNumbers(t, c, role, so, co)
	}
	for _, o := range checked {
		if err := perftestReport(o.stdout, c.size, c.iters); err != nil {
			return fmt.Errorf("%s: %v\nstdout:\n%s", o.cmd, err, o.stdout)
		}
	}
	t.Logf("report (%s):\n%s", client, reportLines(co.stdout))
	return nil
}

// outputNumbers checks a --output pair (c.number): each side prints one
// number and, softrdma's side, its --stats lines after it. What softrdma
// measured (as client, or as the server of send_bw) must be positive. The
// server of a WRITE, READ or atomic bw test measures nothing and prints
// its client's report from the exchange: both sides print the same number,
// whatever the guest's client measured (the emulated guest's clock is not
// softrdma's to check; a zero there is logged).
func outputNumbers(t *testing.T, c perftestCase, role string, so, co *outcome) error {
	number := func(o *outcome) (float64, error) {
		first, _, _ := strings.Cut(strings.TrimLeft(o.stdout, "\n"), "\n")
		v, err := strconv.ParseFloat(first, 64)
		if err != nil || strings.Contains(o.stdout, "#bytes") {
			return 0, fmt.Errorf("%s: --output: first line %q is not a number, or a table was printed\nstdout:\n%s", o.cmd, first, o.stdout)
		}
		return v, nil
	}
	sv, err := number(so)
	if err != nil {
		return err
	}
	cv, err := number(co)
	if err != nil {
		return err
	}
	// The server of a WRITE, READ or atomic bw test prints its client's
	// report.
	echoes := c.test != "send_bw"
	switch {
	case echoes && sv != cv:
		return fmt.Errorf("%s printed %v, its client %v: the report exchange lost it\nserver stdout:\n%s\nclient stdout:\n%s", so.cmd, sv, cv, so.stdout, co.stdout)
	case role == "client" && cv <= 0:
		return fmt.Errorf("%s measured %v\nstdout:\n%s", co.cmd, cv, co.stdout)
	case role == "server" && !echoes && sv <= 0:
		return fmt.Errorf("%s measured %v\nstdout:\n%s", so.cmd, sv, so.stdout)
	}
	if role == "server" && echoes && cv <= 0 {
		t.Logf("the guest's client measured %v (its clock under emulation), and softrdma's server printed it", cv)
	}
	t.Logf("--output: server %v, client %v", sv, cv)
	return nil
}

// rxeCounters reads rxe0's hardware counters in the guest.
func (s *suite) rxeCounters(ctx context.Context) (map[string]uint64, error) {
	r, err := s.guest(ctx, "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *")
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
		name, v, ok := strings.Cut(l, ":")
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("rxe0 hw_counters line %q", l)
		}
		m[name] = n
	}
	return m, nil
}

// softCounters parses the counters line perf --stats prints.
func softCounters(out string) (map[string]uint64, error) {
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "counters:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("counters line %q", l)
		}
		m := map[string]uint64{}
		for i := 0; i < len(f); i += 2 {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("counters line %q: %v", l, err)
			}
			m[f[i]] = n
		}
		return m, nil
	}
	return nil, errors.New("no counters line (perf --stats)")
}

// perftestReport finds the result line ("#bytes #iterations ...") of a
// perftest report and checks its size and iteration count.
func perftestReport(out string, size, iters int) error {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		b, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		if b != size || n != iters {
			return fmt.Errorf("result line %q: want %d bytes, %d iterations", l, size, iters)
		}
		for _, v := range f[2:] {
			// printf writes a NaN with its sign ("-nan"), which ParseFloat
			// does not take; perftest prints inf and nan when its cycle
			// counter calibration fails (seen under TCG).
			if _, err := strconv.ParseFloat(strings.TrimPrefix(v, "-"), 64); err != nil {
				return fmt.Errorf("result line %q: %q is not a number", l, v)
			}
		}
		return nil
	}
	return errors.New("no result line")
}

func reportLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#bytes") || (len(strings.Fields(l)) > 2 && l != "" && (l[0] == ' ' || (l[0] >= '0' && l[0] <= '9'))) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// pingpongCase is one ibv_*_pingpong exchange.
type pingpongCase struct {
	typ   string // rc, uc, ud, srq
	size  int
	iters int
	mtu   int // -m, path MTU; 0: the tools' default (1024)
	// hostExtra are flags for softrdma's side only (the C tool lacks
	// them or, like -t on rxe, refuses them).
	hostExtra []string
}

// runPingpong runs softrdma pingpong in role ("server" or "client")
// against the guest's ibv_TYPE_pingpong over GID index gid. Both sides check
// the data they receive (-c): softrdma every message, the C tools the last.
func (s *suite) runPingpong(t *testing.T, ctx context.Context, c pingpongCase, role string, gid int) error {
	common := []string{"-g", strconv.Itoa(gid), "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters), "-c"}
	if c.mtu != 0 {
		common = append(common, "-m", strconv.Itoa(c.mtu))
	}
	host := append(append([]string{"pingpong", "--type", c.typ, "-d", s.p.Tap(), "--timeout", "90s"}, common...), c.hostExtra...)
	guest := fmt.Sprintf("ibv_%s_pingpong -d rxe0 %s", c.typ, strings.Join(common, " "))
	// The C servers listen on IPv4 only: the exchange runs over IPv4 and -g
	// picks the RoCE address.
	var server, client side
	if role == "server" {
		server, client = side{Host: host}, side{Guest: guest + " " + peer.HostIPv4.String()}
	} else {
		server, client = side{Guest: guest}, side{Host: append(host, peer.GuestIPv4.String())}
	}
	so, co, err := s.pair(t, ctx, server, client)
	if err != nil {
		return err
	}
	for _, o := range []*outcome{so, co} {
		if err := pingpongReport(o.stdout, c.size, c.iters); err != nil {
			return fmt.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", o.cmd, err, o.stdout, o.stderr)
		}
	}
	if slices.Contains(c.hostExtra, "-t") {
		mine := so
		if role == "client" {
			mine = co
		}
		if err := pingpongTSReport(mine.stdout); err != nil {
			return fmt.Errorf("%s: %v\nstdout:\n%s", mine.cmd, err, mine.stdout)
		}
		t.Logf("softrdma -t: %s", strings.Join(strings.Fields(lastLines(mine.stdout, 3)), " "))
	}
	t.Logf("client: %s", strings.Join(strings.Fields(lastLines(co.stdout, 2)), " "))
	return nil
}

// pingpongTSReport checks the three lines of ibv_rc_pingpong -t: the
// largest, smallest and mean receive completion interval, in order.
func pingpongTSReport(out string) error {
	var v []float64
	for _, l := range strings.Split(out, "\n") {
		for _, p := range []string{"Max", "Min", "Average"} {
			if rest, ok := strings.CutPrefix(l, p+" receive completion clock cycles = "); ok {
				f, err := strconv.ParseFloat(rest, 64)
				if err != nil || len(v) != map[string]int{"Max": 0, "Min": 1, "Average": 2}[p] {
					return fmt.Errorf("timestamp line %q out of place or not a number", l)
				}
				v = append(v, f)
			}
		}
	}
	if len(v) != 3 || v[1] <= 0 || v[1] > v[2] || v[2] > v[0] {
		return fmt.Errorf("timestamp lines %v: want max >= average >= min > 0", v)
	}
	return nil
}

// pingpongReport checks the "N bytes in S seconds" and "N iters in S
// seconds" lines of a pingpong report.
func pingpongReport(out string, size, iters int) error {
	var bytesLine, itersLine bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "in" {
			continue
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		switch f[1] {
		case "bytes":
			if n != 2*size*iters {
				return fmt.Errorf("%q: want %d bytes (2 x %d x %d)", l, 2*size*iters, size, iters)
			}
			bytesLine = true
		case "iters":
			if n != iters {
				return fmt.Errorf("%q: want %d iterations", l, iters)
			}
			itersLine = true
		}
	}
	if !bytesLine || !itersLine {
		return errors.New("no \"bytes in\" and \"iters in\" lines")
	}
	return nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
