//go:build capi

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// cmRetry matches what a client of rdma_cm prints when it reached the
// server's device before the server listened: a rejection (no listener on
// the port), SIDR's "unreachable", or a synchronous rdma_connect's
// "Connection refused".
var cmRetry = regexp.MustCompile(`REJECTED|UNREACHABLE|Unable to init the socket connection|rdma_connect: Connection refused`)

// waitBound waits, 5 s at most, until something (the server's device)
// holds UDP port on 127.0.0.1.
func waitBound(port int) {
	for range 200 {
		c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(25 * time.Millisecond)
	}
}

// cmPair runs an rdma_cm server on 127.0.0.1 and its client: the client
// starts once the server's device holds its UDP port, and is run again
// (bounded) while it finds nobody listening yet.
func cmPair(t *testing.T, port int, server, client func(ctx context.Context) *exec.Cmd) (srvOut, cliOut string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sb bytes.Buffer
	srv := server(ctx)
	srv.Stdout, srv.Stderr = &sb, &sb
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// A server that fails (its UDP port taken meanwhile, say) ends the
	// client too, rather than leaving it waiting for an answer.
	srvErr := make(chan error, 1)
	go func() {
		err := srv.Wait()
		if err != nil {
			cancel()
		}
		srvErr <- err
	}()
	waitBound(port)
	var out []byte
	var err error
	for range 50 {
		out, err = client(ctx).CombinedOutput()
		if err == nil || !cmRetry.Match(out) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		cancel()
		<-srvErr
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, sb.String())
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v\n%s\nclient:\n%s", err, sb.String(), out)
	}
	return sb.String(), string(out)
}

func mustContain(t *testing.T, who, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s's output lacks %q:\n%s", who, w, out)
		}
	}
}

// TestRdmacm runs Debian's rdmacm-utils (rping, ucmatose, udaddy) on the
// library (librdmacm.so.1 and libibverbs.so.1) against themselves, server
// on 127.0.0.1 and client on 127.0.0.2, and against softrdma's Go tools in
// both roles: rping's data check (-v prints every ping, the server checks
// what it read), ucmatose's RC SENDs over several connections, udaddy's UD
// datagrams after SIDR.
func TestRdmacm(t *testing.T) {
	built(t)
	const count = "10"
	type prog func(ctx context.Context, port, cmPort int, addr string, peer string) *exec.Cmd
	lib := func(bin string, args ...string) prog {
		return func(ctx context.Context, port, cmPort int, addr, peer string) *exec.Cmd {
			a := append([]string(nil), args...)
			switch bin {
			case "rping":
				a = append(a, "-p", fmt.Sprint(cmPort))
				if peer == "" {
					a = append(a, "-s", "-a", addr)
				} else {
					a = append(a, "-c", "-a", peer, "-I", addr)
				}
			case "ucmatose", "udaddy":
				if bin == "ucmatose" {
					a = append(a, "-p", fmt.Sprint(cmPort))
				}
				a = append(a, "-b", addr)
				if peer != "" {
					a = append(a, "-s", peer)
				}
			}
			return command(ctx, addr, port, bin, a...)
		}
	}
	tool := func(sub string, args ...string) prog {
		return func(ctx context.Context, port, cmPort int, addr, peer string) *exec.Cmd {
			a := append([]string{sub, "--bind", addr, "--roce-port", fmt.Sprint(port)}, args...)
			switch sub {
			case "ping":
				a = append(a, "-p", fmt.Sprint(cmPort))
				if peer == "" {
					a = append(a, "-s", "-a", addr)
				} else {
					a = append(a, "-c", "-a", peer)
				}
			case "cmatose", "udaddy":
				if sub == "cmatose" {
					a = append(a, "-p", fmt.Sprint(cmPort))
				}
				if peer != "" {
					a = append(a, "-s", peer)
				}
			}
			return exec.CommandContext(ctx, toolBin, a...)
		}
	}
	rping := lib("rping", "-v", "-C", count)
	ucmatose := lib("ucmatose", "-c", "2", "-C", count)
	udaddy := lib("udaddy", "-c", "2", "-C", count)
	pingTool := tool("ping", "-v", "-C", count)
	cmatoseTool := tool("cmatose", "-c", "2", "-C", count)
	udaddyTool := tool("udaddy", "-c", "2", "-C", count)
	rpingWant := []string{"ping data: rdma-ping-0: ", "ping data: rdma-ping-9: "}
	doneWant := []string{"test complete", "return status 0"}
	for _, c := range []struct {
		name     string
		bin      string
		srv, cli prog
		srvWant  []string
		cliWant  []string
	}{
		{"rping", "rping", rping, rping, rpingWant, rpingWant},
		{"rping-vs-softrdma/lib-client", "rping", pingTool, rping, nil, rpingWant},
		{"rping-vs-softrdma/lib-server", "rping", rping, pingTool, rpingWant, nil},
		{"ucmatose", "ucmatose", ucmatose, ucmatose, doneWant, doneWant},
		{"ucmatose-vs-softrdma/lib-client", "ucmatose", cmatoseTool, ucmatose, nil, doneWant},
		{"ucmatose-vs-softrdma/lib-server", "ucmatose", ucmatose, cmatoseTool, doneWant, nil},
		{"udaddy", "udaddy", udaddy, udaddy, doneWant, doneWant},
		{"udaddy-vs-softrdma/lib-client", "udaddy", udaddyTool, udaddy, nil, doneWant},
		{"udaddy-vs-softrdma/lib-server", "udaddy", udaddy, udaddyTool, doneWant, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			need(t, c.bin)
			port, cmPort := freePorts(t)
			so, co := cmPair(t, port, func(ctx context.Context) *exec.Cmd { return c.srv(ctx, port, cmPort, "127.0.0.1", "") },
				func(ctx context.Context) *exec.Cmd { return c.cli(ctx, port, cmPort, "127.0.0.2", "127.0.0.1") })
			mustContain(t, "server", so, c.srvWant...)
			mustContain(t, "client", co, c.cliWant...)
		})
	}
}

// TestPerftestRdmacm runs perftest programs with -R (connection setup
// over rdma_cm) on the library, server on 127.0.0.1 and client on
// 127.0.0.2, and checks that both exit 0 and the client reports a result.
// A client that loses perftest 4.5-0.17's race with its server's listen
// runs again with a new server (perftestCMPair): the old one is past the
// exchange a new client would start with.
func TestPerftestRdmacm(t *testing.T) {
	built(t)
	result := regexp.MustCompile(`(?m)^\s+(2|8|65536)\s+100\s+[0-9.]+\s+[0-9.]+`)
	for _, bin := range perftests {
		t.Run(bin, func(t *testing.T) {
			need(t, bin)
			port, cmPort := freePorts(t)
			args := []string{"-R", "-n", "100", "-p", fmt.Sprint(cmPort)}
			_, co := perftestCMPair(t, port, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.1", port, bin, args...)
			}, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.2", port, bin, append(args, "127.0.0.1")...)
			})
			if m := result.FindString(co); m == "" {
				t.Errorf("the client printed no result:\n%s", co)
			} else {
				t.Logf("%s", strings.Join(strings.Fields(m), " "))
			}
		})
	}
}
