package perftest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/udp"
	"github.com/softrdma/softrdma/verbs"
)

// kernelHB tells the race detector that sending a datagram happens before
// receiving it, which the detector cannot see through sockets: without it two
// devices in one process look as if they raced on pooled packet buffers.
type kernelHB struct {
	link.Link
	seq *atomic.Uint64
}

func (l kernelHB) Send(batch []*link.Packet) error {
	l.seq.Add(1)
	return l.Link.Send(batch)
}

func (l kernelHB) Start(h link.Handler) error {
	return l.Link.Start(link.HandlerFunc(func(batch []*link.Packet) {
		l.seq.Load()
		h.Receive(batch)
	}))
}

// devicePair opens two devices over real UDP: 127.0.0.1 and 127.0.0.2 on one
// ephemeral port, or ::1 twice on two ports.
func devicePair(t testing.TB, v6 bool) (*verbs.Device, *verbs.Device) {
	t.Helper()
	open := func(a string, port uint16) (*udp.Link, error) {
		return udp.Open(udp.Config{Addrs: []netip.Addr{netip.MustParseAddr(a)}, Port: port})
	}
	var la, lb *udp.Link
	var err error
	for try := 0; ; try++ {
		if v6 {
			if la, err = open("::1", 0); err == nil {
				if lb, err = open("::1", 0); err != nil {
					la.Close()
				}
			}
		} else if la, err = open("127.0.0.1", 0); err == nil {
			if lb, err = open("127.0.0.2", la.Port()); err != nil {
				la.Close()
			}
		}
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Skipf("loopback address not usable here: %v", err)
		}
		if try == 20 {
			t.Fatal(err)
		}
	}
	hb := new(atomic.Uint64)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	da, err := verbs.Open(kernelHB{la, hb}, &verbs.Options{Name: "srv", MTU: verbs.MTU1024, RemotePort: lb.Port(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	db, err := verbs.Open(kernelHB{lb, hb}, &verbs.Options{Name: "cli", MTU: verbs.MTU1024, RemotePort: la.Port(), Logger: quiet})
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		da.Close()
		db.Close()
	})
	return da, db
}

// runPair runs a server on srv and a client on cli and returns both reports.
func runPair(t *testing.T, srv, cli *verbs.Device, base Config) (string, string, error, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sout, cout bytes.Buffer
	var serr, cerr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c := base
		c.Out = &sout
		serr = Run(ctx, c, srv, &Hooks{Listener: l})
	}()
	go func() {
		defer wg.Done()
		c := base
		c.Out = &cout
		c.Server = "127.0.0.1"
		c.Port = port
		cerr = Run(ctx, c, cli, nil)
	}()
	wg.Wait()
	return sout.String(), cout.String(), serr, cerr
}

var (
	bwRow  = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
	latRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
)

// TestLoopback runs every test between two softrdma devices over real UDP
// on 127.0.0.1 and 127.0.0.2, checking both sides' output.
func TestLoopback(t *testing.T) {
	for _, name := range TestNames {
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			test := Tests[name]
			srv, cli := devicePair(t, false)
			base := Config{Test: test, Iters: 20, Inline: -1, GIDIndex: -1}
			if test.BW && test.Verb != Atomic {
				base.SetSize(8192)
			}
			qps := srv.NumQPs()
			sout, cout, serr, cerr := runPair(t, srv, cli, base)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\nserver output:\n%s\nclient output:\n%s", serr, cerr, sout, cout)
			}
			// Run destroys what it created: a QP left for Device.Close
			// would send its last ACK after the run's counters were read.
			if n, m := srv.NumQPs(), cli.NumQPs(); n != qps || m != qps {
				t.Errorf("after Run the devices have %d and %d QPs, want %d", n, m, qps)
			}
			for _, out := range []string{sout, cout} {
				if !strings.Contains(out, " local address: LID 0000 QPN 0x") || !strings.Contains(out, " remote address: LID 0000") {
					t.Errorf("no address lines in\n%s", out)
				}
				if !strings.Contains(out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:0") {
					t.Errorf("no GID line in\n%s", out)
				}
			}
			if test.BW {
				// Both sides print the client's numbers (the server gets
				// them in the report exchange, or measures SEND itself).
				for side, out := range map[string]string{"server": sout, "client": cout} {
					m := bwRow.FindStringSubmatch(out)
					if m == nil {
						t.Fatalf("%s: no result row in\n%s", side, out)
					}
					size := 8192
					if test.Verb == Atomic {
						size = 8
					}
					if m[1] != strconv.Itoa(size) || m[2] != "20" {
						t.Errorf("%s: row %q: want size %d and 20 iterations", side, m[0], size)
					}
					if avg, _ := strconv.ParseFloat(m[4], 64); avg <= 0 {
						t.Errorf("%s: average bandwidth %v in %q", side, avg, m[0])
					}
				}
				t.Logf("client:\n%s", cout)
				return
			}
			withRows := []string{cout}
			if test.Verb == Write || test.Verb == Send {
				withRows = append(withRows, sout)
			} else if latRow.MatchString(sout) {
				t.Errorf("the %s server printed a latency row:\n%s", name, sout)
			}
			for _, out := range withRows {
				m := latRow.FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no latency row in\n%s", out)
				}
				if m[2] != "20" {
					t.Errorf("row %q: want 20 iterations", m[0])
				}
				tmin, _ := strconv.ParseFloat(m[3], 64)
				tmax, _ := strconv.ParseFloat(m[4], 64)
				if tmin <= 0 || tmax < tmin {
					t.Errorf("row %q: t_min %v t_max %v", m[0], tmin, tmax)
				}
			}
			t.Logf("client:\n%s", cout)
		})
	}
}

// TestLoopbackIPv6 runs a bw and a latency test over ::1.
func TestLoopbackIPv6(t *testing.T) {
	for _, name := range []string{"read_bw", "send_lat"} {
		t.Run(name, func(t *testing.T) {
			srv, cli := devicePair(t, true)
			base := Config{Test: Tests[name], Iters: 10, Inline: -1, GIDIndex: -1}
			sout, cout, serr, cerr := runPair(t, srv, cli, base)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			if !strings.Contains(cout, " GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01") {
				t.Errorf("no ::1 GID in\n%s", cout)
			}
		})
	}
}

// TestAllSizesAndDuration covers -a, -D, -q and the atomic types.
func TestAllSizesAndDuration(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		rows int
	}{
		{"write_bw -a", Config{Test: Tests["write_bw"], All: true, Iters: 5}, 23},
		{"send_bw -a", Config{Test: Tests["send_bw"], All: true, Iters: 5}, 23},
		{"send_lat -a", Config{Test: Tests["send_lat"], All: true, Iters: 5, Inline: -1}, 23},
		{"write_lat -a", Config{Test: Tests["write_lat"], All: true, Iters: 5, Inline: -1}, 23},
		// No read_lat -a: RDMA READs of several MiB over loopback UDP lose
		// responses to socket-buffer overflow, and the engine's READ retry
		// then often ends in "transport retry counter exceeded" (a verbs
		// issue, reported; read_lat -a against Linux rxe passes).
		{"read_lat -s 64K", Config{Test: Tests["read_lat"], Iters: 20, Size: 65536}, 1},
		{"write_bw -q 3", Config{Test: Tests["write_bw"], NumQPs: 3, Iters: 50, Size: 4096}, 1},
		{"atomic_bw CMP_AND_SWAP", Config{Test: Tests["atomic_bw"], Atomic: CmpAndSwap, Iters: 50}, 1},
		{"write_bw -D 1", Config{Test: Tests["write_bw"], Duration: time.Second}, 1},
		{"send_bw -D 1", Config{Test: Tests["send_bw"], Duration: time.Second, Size: 1024}, 1},
		{"write_lat -D 1", Config{Test: Tests["write_lat"], Duration: time.Second}, 1},
		{"send_lat -D 1", Config{Test: Tests["send_lat"], Duration: time.Second}, 1},
		// A used receive is posted again after the answer's post, or before
		// it when it is the only one (-r 1); each is needed for every
		// message past the first -r.
		{"send_lat -r 1", Config{Test: Tests["send_lat"], Iters: 300, RxDepth: 1}, 1},
		{"send_lat -r 2", Config{Test: Tests["send_lat"], Iters: 300, RxDepth: 2}, 1},
		{"read_lat -D 1", Config{Test: Tests["read_lat"], Duration: time.Second}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && (tc.cfg.All || tc.cfg.Duration > 0) {
				t.Skip("long")
			}
			srv, cli := devicePair(t, false)
			if tc.cfg.Size != 0 {
				tc.cfg.SetSize(tc.cfg.Size)
			}
			sout, cout, serr, cerr := runPair(t, srv, cli, tc.cfg)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			var rows int
			switch {
			case tc.cfg.Test.BW:
				rows = len(bwRow.FindAllString(cout, -1))
			case tc.cfg.Duration > 0:
				rows = len(regexp.MustCompile(`(?m)^ 2\s+\d+\s+[\d.]+\s+[\d.]+\s*$`).FindAllString(cout, -1))
			default:
				rows = len(latRow.FindAllString(cout, -1))
			}
			if rows != tc.rows {
				t.Errorf("client printed %d result rows, want %d:\n%s", rows, tc.rows, cout)
			}
			if tc.cfg.NumQPs == 3 && strings.Count(cout, "remote address") != 3 {
				t.Errorf("want 3 remote address lines:\n%s", cout)
			}
			if tc.cfg.Duration > 0 && tc.cfg.Test.BW && !strings.Contains(cout, " 0.00 ") {
				t.Errorf("duration mode reports no peak, as perftest:\n%s", cout)
			}
		})
	}
}

// TestErrors: an absent server, a port in use, and malformed or truncated
// exchanges fail with clear errors and do not hang.
func TestErrors(t *testing.T) {
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := devicePair(t, false)
	base := Config{Test: Tests["write_bw"], Iters: 5, GIDIndex: -1}

	t.Run("absent server", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		c := base
		c.Server, c.Port = "127.0.0.1", port
		err := Run(ctx, c, cli, nil)
		if err == nil || !strings.Contains(err.Error(), "couldn't connect") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c := base
		c.Port = l.Addr().(*net.TCPAddr).Port
		err = Run(ctx, c, cli, nil)
		if err == nil || !strings.Contains(err.Error(), "couldn't listen to port") {
			t.Fatalf("err %v", err)
		}
	})

	// fake is a server that answers the client with script, then closes.
	fake := func(t *testing.T, script func(c net.Conn)) error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			script(c)
		}()
		c := base
		c.Server, c.Port = "127.0.0.1", l.Addr().(*net.TCPAddr).Port
		return Run(ctx, c, cli, nil)
	}
	read := func(c net.Conn, n int) { io.ReadFull(c, make([]byte, n)) }
	version := func(c net.Conn, v string) {
		read(c, VersionSize)
		b := make([]byte, VersionSize)
		copy(b, v)
		c.Write(b)
	}
	preamble := func(c net.Conn) {
		version(c, "6.06")
		for i := 0; i < 2; i++ {
			read(c, 4)
			c.Write([]byte{0, 0, 0x10, 0})
		}
		read(c, 2)
		c.Write([]byte("3\x00"))
	}
	for _, tc := range []struct {
		name   string
		script func(c net.Conn)
		want   string
	}{
		{"old version", func(c net.Conn) { version(c, "5.60") }, "older than 5.70"},
		{"garbage version", func(c net.Conn) { version(c, "hello") }, "older than 5.70"},
		{"closed in version", func(c net.Conn) { read(c, VersionSize); c.Write([]byte("6.0")) }, "closed the connection"},
		{"closed in sizes", func(c net.Conn) { version(c, "6.06"); read(c, 4); c.Write([]byte{0, 0}) }, "closed the connection"},
		{"bad sizes", func(c net.Conn) {
			version(c, "6.06")
			read(c, 4)
			c.Write([]byte{0xff, 0xff, 0xff, 0xff})
			read(c, 4)
			c.Write([]byte{0, 0, 0, 64})
		}, "out of range"},
		{"garbage keys", func(c net.Conn) {
			preamble(c)
			read(c, KeyMsgSize)
			c.Write(bytes.Repeat([]byte("x"), KeyMsgSize))
		}, "keys message"},
		{"truncated keys", func(c net.Conn) {
			preamble(c)
			read(c, KeyMsgSize)
			c.Write([]byte(rxeKeys[:40]))
		}, "closed the connection"},
		{"IPv6 GID against IPv4", func(c net.Conn) {
			preamble(c)
			read(c, KeyMsgSize)
			d := Dest{QPN: 5, GID: [16]byte{0xfd, 15: 2}}
			c.Write(d.Marshal())
		}, "GID types"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fake(t, tc.script)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}
