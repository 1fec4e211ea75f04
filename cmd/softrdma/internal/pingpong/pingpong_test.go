package pingpong

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
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// freeUDPPort returns a UDP port free on addr when asked.
func freeUDPPort(t *testing.T, addr string) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addr), 0)))
	if err != nil {
		t.Skipf("cannot bind %s: %v", addr, err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// openPair opens two devices on loopback over real UDP: on two addresses
// sharing a port, or on one address (::1) with a port each, each device
// sending to the other's port.
func openPair(t *testing.T, a, b string) (*tool.Device, *tool.Device) {
	t.Helper()
	pa := freeUDPPort(t, a)
	pb := pa
	if a == b {
		pb = freeUDPPort(t, b)
	}
	log := slog.New(slog.DiscardHandler)
	open := func(addr string, local, remote uint16) *tool.Device {
		d, err := roce.Open([]netip.Addr{netip.MustParseAddr(addr)}, &roce.Options{Port: local,
			Options: verbs.Options{MTU: verbs.MTU1024, RemotePort: remote, Logger: log}})
		if err != nil {
			t.Fatalf("open %s:%d: %v", addr, local, err)
		}
		t.Cleanup(func() { d.Close() })
		g, _ := d.QueryGID(1, 0)
		return &tool.Device{Device: d, GIDIndex: 0, GID: g}
	}
	return open(a, pa, pb), open(b, pb, pa)
}

func listen(t *testing.T) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

type outcome struct {
	res Result
	err error
	out string
}

// pingpong runs a server on srv and a client on cli with the same cfg.
func pingpong(t *testing.T, srv, cli *tool.Device, scfg, ccfg Config) (s, c outcome) {
	t.Helper()
	ln, port := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scfg.Listener = ln
	ccfg.Host, ccfg.TCPPort = "127.0.0.1", port
	var sb, cb bytes.Buffer
	scfg.Out, ccfg.Out = &sb, &cb
	done := make(chan outcome)
	go func() {
		r, err := Run(ctx, srv, scfg)
		done <- outcome{r, err, sb.String()}
	}()
	r, err := Run(ctx, cli, ccfg)
	c = outcome{r, err, cb.String()}
	s = <-done
	return s, c
}

func baseConfig(typ Type) Config {
	return Config{Type: typ, Size: 4096, MTU: 1024, RxDepth: 20, Iters: 50, NumQP: 4, Check: true, Timeout: 10 * time.Second}
}

var (
	localRE  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	remoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	bytesRE  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`)
	itersRE  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// checkOutput checks the lines the C tools print and returns the local and
// remote (QPN, PSN, GID) triples.
func checkOutput(t *testing.T, out string, nQP int, cfg Config) (local, remote [][3]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2*nQP+2 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 2*nQP+2, out)
	}
	for i := range nQP {
		m := localRE.FindStringSubmatch(lines[i])
		if m == nil {
			t.Fatalf("line %q is no local address line", lines[i])
		}
		sep := ","
		if cfg.Type == UD {
			sep = ":"
		}
		if !strings.Contains(lines[i], "PSN 0x"+m[2]+sep) {
			t.Errorf("line %q: separator before GID should be %q", lines[i], sep)
		}
		local = append(local, [3]string{m[1], m[2], m[3]})
		m = remoteRE.FindStringSubmatch(lines[nQP+i])
		if m == nil {
			t.Fatalf("line %q is no remote address line", lines[nQP+i])
		}
		remote = append(remote, [3]string{m[1], m[2], m[3]})
	}
	m := bytesRE.FindStringSubmatch(lines[2*nQP])
	if m == nil || m[1] != strconv.Itoa(cfg.Size*cfg.Iters*2) {
		t.Errorf("bytes line %q, want %d bytes", lines[2*nQP], cfg.Size*cfg.Iters*2)
	}
	m = itersRE.FindStringSubmatch(lines[2*nQP+1])
	if m == nil || m[1] != strconv.Itoa(cfg.Iters) {
		t.Errorf("iters line %q, want %d iters", lines[2*nQP+1], cfg.Iters)
	}
	return local, remote
}

func TestPingpongLoopback(t *testing.T) {
	for _, fam := range [][2]string{{"127.0.0.1", "127.0.0.2"}, {"::1", "::1"}} {
		for _, typ := range []Type{RC, UC, UD, SRQ} {
			for _, events := range []bool{false, true} {
				name := fam[0] + "/" + typ.String()
				if events {
					name += "/events"
				}
				t.Run(name, func(t *testing.T) {
					srv, cli := openPair(t, fam[0], fam[1])
					cfg := baseConfig(typ)
					if typ == UD {
						cfg.Size = 1000 // not above the MTU, not a multiple of 4
					}
					cfg.Events = events
					s, c := pingpong(t, srv, cli, cfg, cfg)
					if s.err != nil || c.err != nil {
						t.Fatalf("server: %v\nclient: %v\nserver output:\n%s\nclient output:\n%s", s.err, c.err, s.out, c.out)
					}
					nQP := 1
					if typ == SRQ {
						nQP = cfg.NumQP
					}
					for _, o := range []outcome{s, c} {
						if o.res.Iters != cfg.Iters || o.res.Bytes != int64(cfg.Size*cfg.Iters*2) || o.res.Elapsed <= 0 {
							t.Errorf("result %+v", o.res)
						}
					}
					sl, sr := checkOutput(t, s.out, nQP, cfg)
					cl, cr := checkOutput(t, c.out, nQP, cfg)
					// Each side's remote lines are the other's local lines.
					for i := range nQP {
						if sl[i] != cr[i] || cl[i] != sr[i] {
							t.Errorf("QP %d: server local %v / client remote %v, client local %v / server remote %v", i, sl[i], cr[i], cl[i], sr[i])
						}
					}
					if g := sl[0][2]; g != srv.GID.String() {
						t.Errorf("server GID %s, want %v", g, srv.GID)
					}
				})
			}
		}
	}
}

// A client without -c sends 0x7b everywhere; a server with -c must reject
// it (the C tools' client writes 0 at each page start).
func TestCheckDetectsBadData(t *testing.T) {
	srv, cli := openPair(t, "127.0.0.1", "127.0.0.2")
	scfg := baseConfig(RC)
	ccfg := scfg
	ccfg.Check = false
	ccfg.Timeout = 2 * time.Second
	s, c := pingpong(t, srv, cli, scfg, ccfg)
	if !errors.Is(s.err, ErrData) || !strings.Contains(s.out, "invalid data in page 0") {
		t.Errorf("server: %v\n%s", s.err, s.out)
	}
	if c.err == nil {
		t.Errorf("client succeeded against a server that stopped")
	}
}

func TestClientNoServer(t *testing.T) {
	_, cli := openPair(t, "127.0.0.1", "127.0.0.2")
	ln, port := listen(t)
	ln.Close()
	cfg := baseConfig(RC)
	cfg.Host, cfg.TCPPort = "127.0.0.1", port
	_, err := Run(context.Background(), cli, cfg)
	if err == nil || !strings.Contains(err.Error(), "couldn't connect to 127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("Run = %v, want a connect error", err)
	}
}

func TestServerPortTaken(t *testing.T) {
	srv, _ := openPair(t, "127.0.0.1", "127.0.0.2")
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := baseConfig(RC)
	cfg.TCPPort = ln.Addr().(*net.TCPAddr).Port
	_, err = Run(context.Background(), srv, cfg)
	if err == nil || !strings.Contains(err.Error(), "couldn't listen to port") {
		t.Errorf("Run = %v, want a listen error", err)
	}
}

// fakePeer accepts or dials and plays script: it writes what to send and
// reads n bytes first if read > 0.
func TestMalformedExchange(t *testing.T) {
	bad := []byte("this is not an exchange message at all, not at all!\x00")
	zeroGID := (Dest{QPN: 0x11, PSN: 1}).Marshal()
	cases := []struct {
		name string
		send []byte
		want error
		text string
	}{
		{"garbage", bad, ErrExchange, "malformed"},
		{"short", []byte("0000:000011"), ErrExchange, "couldn't read remote address"},
		{"no GID", zeroGID[:], ErrExchange, "no GID"},
	}
	for _, c := range cases {
		t.Run("client/"+c.name, func(t *testing.T) {
			_, cli := openPair(t, "127.0.0.1", "127.0.0.2")
			ln, port := listen(t)
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				io.ReadFull(conn, make([]byte, MsgLen))
				conn.Write(c.send)
				if conn, ok := conn.(*net.TCPConn); ok {
					conn.CloseWrite()
				}
				io.Copy(io.Discard, conn)
			}()
			cfg := baseConfig(RC)
			cfg.Host, cfg.TCPPort = "127.0.0.1", port
			_, err := Run(context.Background(), cli, cfg)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("client: %v, want %v containing %q", err, c.want, c.text)
			}
		})
		t.Run("server/"+c.name, func(t *testing.T) {
			srv, _ := openPair(t, "127.0.0.1", "127.0.0.2")
			ln, port := listen(t)
			errc := make(chan error)
			go func() {
				cfg := baseConfig(RC)
				cfg.Listener = ln
				_, err := Run(context.Background(), srv, cfg)
				errc <- err
			}()
			conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Fatal(err)
			}
			conn.Write(c.send)
			conn.(*net.TCPConn).CloseWrite()
			err = <-errc
			conn.Close()
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("server: %v, want %v containing %q", err, c.want, c.text)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	_, cli := openPair(t, "127.0.0.1", "127.0.0.2")
	for _, c := range []struct {
		mod  func(*Config)
		text string
	}{
		{func(c *Config) { c.MTU = 1000 }, "MTU 1000"},
		{func(c *Config) { c.Size = 0 }, "must be positive"},
		{func(c *Config) { c.Type, c.NumQP, c.RxDepth = SRQ, 8, 4 }, "rx_depth 4 is too small for 8 QPs"},
		{func(c *Config) { c.Type, c.NumQP = SRQ, 300 }, "num_qp 300"},
		{func(c *Config) { c.Type, c.Size = UD, 2048 }, "larger than port MTU (1024)"},
		{func(c *Config) { c.TCPPort = 70000 }, "TCP port"},
	} {
		cfg := baseConfig(RC)
		c.mod(&cfg)
		cfg.Host = "127.0.0.1"
		_, err := Run(context.Background(), cli, cfg)
		if !errors.Is(err, tool.ErrUsage) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%+v: %v, want usage error %q", cfg, err, c.text)
		}
	}
}

func TestServerNoClient(t *testing.T) {
	srv, _ := openPair(t, "127.0.0.1", "127.0.0.2")
	ln, _ := listen(t)
	cfg := baseConfig(RC)
	cfg.Listener, cfg.Timeout = ln, 100*time.Millisecond
	_, err := Run(context.Background(), srv, cfg)
	if err == nil || !strings.Contains(err.Error(), "no client connected within 100ms") {
		t.Errorf("Run = %v, want a timeout", err)
	}
}
