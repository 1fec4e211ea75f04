package perftest

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
)

// runPairCM runs a server on srv and a client on cli in rdma_cm mode; the
// client starts once the server listens.
func runPairCM(t *testing.T, srv, cli *verbs.Device, base Config, server string) (string, string, error, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base.RDMACM = true
	var sout, cout bytes.Buffer
	var serr, cerr error
	listening := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := base
		c.Out = &sout
		var once sync.Once
		serr = Run(ctx, c, srv, &Hooks{CMListening: func(netip.AddrPort) { once.Do(func() { close(listening) }) }})
		once.Do(func() { close(listening) })
	}()
	<-listening
	c := base
	c.Out = &cout
	c.Server = server
	cerr = Run(ctx, c, cli, nil)
	if cerr != nil {
		cancel() // do not leave the server waiting
	}
	wg.Wait()
	return sout.String(), cout.String(), serr, cerr
}

// TestRDMACMLoopback runs every test in rdma_cm mode between two devices
// over real UDP on 127.0.0.1 and 127.0.0.2.
func TestRDMACMLoopback(t *testing.T) {
	for _, name := range TestNames {
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			test := Tests[name]
			srv, cli := devicePair(t, false)
			base := Config{Test: test, Iters: 20, Inline: -1, GIDIndex: -1}
			if test.BW && test.Verb != Atomic {
				base.SetSize(8192)
			}
			sout, cout, serr, cerr := runPairCM(t, srv, cli, base, "127.0.0.1")
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\nserver output:\n%s\nclient output:\n%s", serr, cerr, sout, cout)
			}
			for side, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm") {
					t.Errorf("%s: no rdma_cm lines in\n%s", side, out)
				}
				// Keys are not printed in rdma_cm mode, as perftest.
				if !strings.Contains(out, " local address: LID 0000 QPN 0x") || strings.Contains(out, "RKey") {
					t.Errorf("%s: address lines wrong in\n%s", side, out)
				}
			}
			if !strings.Contains(sout, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01") ||
				!strings.Contains(cout, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:02") {
				t.Errorf("GIDs of the rdma_cm source addresses missing:\n%s\n%s", sout, cout)
			}
			rowsIn := []string{cout}
			if test.BW || test.Verb == Write || test.Verb == Send {
				rowsIn = append(rowsIn, sout)
			}
			for _, out := range rowsIn {
				row := latRow
				if test.BW {
					row = bwRow
				}
				m := row.FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no result row in\n%s", out)
				}
				if m[2] != "20" {
					t.Errorf("row %q: want 20 iterations", m[0])
				}
			}
		})
	}
}

// TestRDMACMLoopbackIPv6 runs rdma_cm mode over ::1, with two QPs.
func TestRDMACMLoopbackIPv6(t *testing.T) {
	for _, name := range []string{"write_bw", "send_lat"} {
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			srv, cli := devicePair(t, true)
			base := Config{Test: Tests[name], Iters: 10, Inline: -1, GIDIndex: -1}
			if Tests[name].BW {
				base.NumQPs = 2
			}
			sout, cout, serr, cerr := runPairCM(t, srv, cli, base, "::1")
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			for _, out := range []string{sout, cout} {
				if !strings.Contains(out, " GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01") {
					t.Errorf("no ::1 GID in\n%s", out)
				}
				if n := strings.Count(out, " remote address:"); n != base.NumQPs && !(n == 1 && base.NumQPs == 0) {
					t.Errorf("%d remote address lines, want %d:\n%s", n, base.NumQPs, out)
				}
			}
		})
	}
}

// TestRDMACMNoServer checks the client's errors when nobody listens on the
// port (REJ, invalid service ID) and when no device answers at all.
func TestRDMACMNoServer(t *testing.T) {
	leakcheck.Check(t)
	srv, cli := devicePair(t, false)
	scm, err := rdmacm.New([]*verbs.Device{srv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := Config{Test: Tests["write_bw"], Iters: 10, Inline: -1, GIDIndex: -1, RDMACM: true, Server: "127.0.0.1"}
	err = Run(ctx, cfg, cli, nil)
	if !errors.Is(err, ErrCM) || !errors.Is(err, rdmacm.ErrRejected) || !strings.Contains(err.Error(), "rejected: no server listens on that port (reason 8)") {
		t.Errorf("no listener: %v, want a rejection (reason 8)", err)
	}
	// Nobody at all at 127.0.0.3: the REQ goes unanswered.
	quick := &rdmacm.Options{CM: cm.Options{ResponseTimeout: 12, MaxRetries: 2}}
	cfg.Server = "127.0.0.3"
	start := time.Now()
	err = Run(ctx, cfg, cli, &Hooks{CMOptions: quick})
	if !errors.Is(err, ErrCM) || !errors.Is(err, rdmacm.ErrUnreachable) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("no peer: %v, want unreachable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("giving up took %v", d)
	}
}

// TestRDMACMServerCancelled checks that a waiting rdma_cm server returns
// when its context ends.
func TestRDMACMServerCancelled(t *testing.T) {
	leakcheck.Check(t)
	srv, _ := devicePair(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{Test: Tests["send_lat"], Iters: 10, Inline: -1, GIDIndex: -1, RDMACM: true}
	err := Run(ctx, cfg, srv, &Hooks{CMListening: func(netip.AddrPort) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestRDMACMClientGone checks that a server waiting in the exchange fails
// when the client disconnects, instead of waiting forever.
func TestRDMACMClientGone(t *testing.T) {
	leakcheck.Check(t)
	srv, cli := devicePair(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ccm, err := rdmacm.New([]*verbs.Device{cli}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ccm.Close()
	listening := make(chan netip.AddrPort, 1)
	errc := make(chan error, 1)
	go func() {
		cfg := Config{Test: Tests["write_lat"], Iters: 10, Inline: -1, GIDIndex: -1, RDMACM: true}
		errc <- Run(ctx, cfg, srv, &Hooks{CMListening: func(a netip.AddrPort) { listening <- a }})
	}()
	a := <-listening
	conn, err := rdmacm.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), a.Port()), &rdmacm.ConnOptions{CM: ccm})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close() // without sending the version
	err = <-errc
	if !errors.Is(err, ErrCM) || !strings.Contains(err.Error(), "disconnected") {
		t.Errorf("server: %v, want the peer's disconnect", err)
	}
}
