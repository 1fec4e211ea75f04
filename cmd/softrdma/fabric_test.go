package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/fabric/remote"
	"github.com/softrdma/softrdma/link/ib"
)

// A switch and two CAs, in ibnetdiscover's format.
const testTopology = `Switch	4 "Sw1"
[1]	"HcaA"[1]
[2]	"HcaB"[1]

Hca	1 "HcaA"
[1]	"Sw1"[1]

Hca	1 "HcaB"
[1]	"Sw1"[2]
`

// TestFabricCommand runs softrdma fabric until its context ends and talks
// to it as libumad2sim does: a client attaches at a named CA and its
// directed-route SMP is answered by the fabric.
func TestFabricCommand(t *testing.T) {
	topo := filepath.Join(t.TempDir(), "net")
	if err := os.WriteFile(topo, []byte(testTopology), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := fmt.Sprintf("softrdma-cmd-test-%d", os.Getpid())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runFabric(ctx, []string{"-s", sock, "-hca", "off", topo}, io.Discard) }()

	var c *ibsim.Client
	deadline := time.Now().Add(5 * time.Second)
	for {
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		var err error
		c, err = ibsim.Dial(dctx, ibsim.ClientConfig{SockName: sock, Node: "HcaB"})
		dcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("softrdma fabric does not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.NodeName() != "HcaB" {
		t.Fatalf("attached at %q", c.NodeName())
	}
	var r ibsim.Request
	r.DLID, r.SLID, r.Length = 0xffff, 0xffff, ibsim.MADSize
	r.MAD[0], r.MAD[1], r.MAD[2], r.MAD[3] = 1, 0x81, 1, 1 // SubnGet, directed route
	r.MAD[17] = 0x11                                       // NodeInfo
	r.MAD[32], r.MAD[33], r.MAD[34], r.MAD[35] = 0xff, 0xff, 0xff, 0xff
	if err := c.Send(&r); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := c.Recv(rctx)
	rcancel()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 0 || resp.MAD[3] != 0x81 || resp.MAD[64+2] != 1 {
		t.Fatalf("NodeInfo answer: status %d, method 0x%x, node type %d", resp.Status, resp.MAD[3], resp.MAD[64+2])
	}
	c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("softrdma fabric ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("softrdma fabric did not end with its context")
	}
}

// TestFabricCommandHCA: softrdma fabric serves its CA ports at -hca's
// address; a remote port attaches HcaB's and sees its attributes (INIT: no
// SM has run), an unknown node is refused.
func TestFabricCommandHCA(t *testing.T) {
	dir := t.TempDir()
	topo := filepath.Join(dir, "net")
	if err := os.WriteFile(topo, []byte(testTopology), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := fmt.Sprintf("softrdma-cmd-hca-test-%d", os.Getpid())
	addr := "unix:" + filepath.Join(dir, "hca.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runFabric(ctx, []string{"-s", sock, "-hca", addr, "-sm=false", topo}, io.Discard) }()

	d := remote.Dialer{Logger: slog.New(slog.DiscardHandler)}
	var p *remote.Port
	deadline := time.Now().Add(5 * time.Second)
	for {
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		var err error
		p, err = d.Dial(dctx, addr, "HcaB", 1)
		dcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("softrdma fabric does not serve HCA ports: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := p.Attr(); a.State != ib.StateInit || a.PortGUID == 0 {
		t.Errorf("HcaB's attributes: %+v", a)
	}
	if _, err := d.Dial(ctx, addr, "HcaC", 1); !errors.Is(err, fabric.ErrNoNode) {
		t.Errorf("unknown node: %v", err)
	}
	p.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("softrdma fabric ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("softrdma fabric did not end with its context")
	}
}

func TestFabricUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"a", "b"}, {"-s", "x", "-p", "7070", "net"}} {
		if err := runFabric(context.Background(), args, io.Discard); !errors.Is(err, tool.ErrUsage) {
			t.Errorf("softrdma fabric %q: %v, want a usage error", args, err)
		}
	}
	if err := runFabric(context.Background(), []string{filepath.Join(t.TempDir(), "none")}, io.Discard); err == nil || errors.Is(err, tool.ErrUsage) {
		t.Errorf("missing topology: %v", err)
	}
}
