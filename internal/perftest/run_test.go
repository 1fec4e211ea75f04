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
			test := Tests[name]
			srv, cli := devicePair(t, false)
			base := Config{Test: test, Iters: 20, Inline: -1, GIDIndex: -1}
			if test.BW && test.Verb != Atomic {
				base.SetSize(8192)
			}
			sout, cout, serr, cerr := runPair(t, srv, cli, base)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\nserver output:\n%s\nclient output:\n%s", serr, cerr, sout, cout)
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
