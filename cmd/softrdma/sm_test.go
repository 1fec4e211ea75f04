package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/fabric/remote"
	"github.com/softrdma/softrdma/link/ib"
)

// startFabricCmd runs softrdma fabric with args on testTopology until the
// test ends.
func startFabricCmd(t *testing.T, args ...string) {
	t.Helper()
	topo := filepath.Join(t.TempDir(), "net")
	if err := os.WriteFile(topo, []byte(testTopology), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFabric(ctx, append(args, topo), io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("softrdma fabric: %v", err)
		}
	})
}

// softrdma fabric runs the SM by default: a device's port on it becomes
// ACTIVE with a LID and the SM's LID.
func TestFabricEmbeddedSM(t *testing.T) {
	dir := t.TempDir()
	addr := "unix:" + filepath.Join(dir, "hca.sock")
	startFabricCmd(t, "-s", fmt.Sprintf("softrdma-cmd-sm-test-%d", os.Getpid()), "-hca", addr, "-sweep", "50ms")
	d := remote.Dialer{Logger: slog.New(slog.DiscardHandler)}
	var p *remote.Port
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var err error
		p, err = d.Dial(ctx, addr, "HcaB", 1)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("softrdma fabric does not serve HCA ports: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer p.Close()
	for {
		a := p.Attr()
		if a.State == ib.StateActive && a.LID != 0 && a.SMLID != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HcaB's port: %+v, want ACTIVE with LIDs", a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// softrdma sm -o sweeps softrdma fabric -sm=false once, as opensm -o.
func TestSMCommandOnce(t *testing.T) {
	sock := fmt.Sprintf("softrdma-cmd-smo-test-%d", os.Getpid())
	startFabricCmd(t, "-s", sock, "-hca", "off", "-sm=false")
	var out bytes.Buffer
	deadline := time.Now().Add(5 * time.Second)
	for {
		out.Reset()
		err := runSMCmd(context.Background(), []string{"-ibsim", sock, "-node", "HcaA", "-o", "-routing", "updn"}, &out)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("softrdma sm -o: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := out.String()
	for _, want := range []string{`"HcaA" port 1 lid `, `"HcaB" port 1 lid `, `"Sw1" port 0 lid `, "SUBNET UP: 3 nodes, 3 LIDs"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestSMCommandUsage(t *testing.T) {
	for _, args := range [][]string{{"x"}, {"-ibsim", "a", "-udp", "b:1"}, {"-bogus"}} {
		if err := runSMCmd(context.Background(), args, io.Discard); !errors.Is(err, tool.ErrUsage) {
			t.Errorf("softrdma sm %q: %v, want a usage error", args, err)
		}
	}
}

// softrdma fabric -P FILE -qos FILE: the embedded SM writes the policy; a
// device's port shows the partitions' P_Keys and the QoS SL2VL table.
func TestFabricEmbeddedSMPolicy(t *testing.T) {
	dir := t.TempDir()
	parts, qos := filepath.Join(dir, "partitions.conf"), filepath.Join(dir, "opensm.conf")
	if err := os.WriteFile(parts, []byte("Default=0x7fff : ALL=full ;\nWeb=0x0005 : ALL_CAS=limited ;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(qos, []byte("max_op_vls 2\nqos TRUE\nqos_max_vls 2\nqos_sl2vl 0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "unix:" + filepath.Join(dir, "hca.sock")
	startFabricCmd(t, "-s", fmt.Sprintf("softrdma-cmd-smpol-test-%d", os.Getpid()), "-hca", addr, "-sweep", "50ms", "-P", parts, "--qos", qos)
	d := remote.Dialer{Logger: slog.New(slog.DiscardHandler)}
	var p *remote.Port
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var err error
		p, err = d.Dial(ctx, addr, "HcaB", 1)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("softrdma fabric does not serve HCA ports: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer p.Close()
	for {
		a := p.Attr()
		if a.State == ib.StateActive && len(a.PKeys) >= 2 && a.PKeys[0] == 0xFFFF && a.PKeys[1] == 0x0005 &&
			a.OperVLs == 2 && a.SL2VL == [16]uint8{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1} {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HcaB's port: %+v, want ACTIVE with P_Keys 0xffff, 0x0005, 2 VLs and the SL2VL table", a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A policy file that does not parse, or is missing, stops softrdma sm.
func TestSMCommandPolicyErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("Default=0x7fff : ALL=full\nqos_bogus 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A qos-policy.conf (named by the -qos file's qos_policy_file) with
	// a syntax error, and one missing.
	badPolicy, withBad, withNone := filepath.Join(dir, "qos-policy.conf"), filepath.Join(dir, "qos1.conf"), filepath.Join(dir, "qos2.conf")
	if err := os.WriteFile(badPolicy, []byte("qos-ulps\n  mpi : 3\nend-qos-ulps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(withBad, []byte("qos TRUE\nqos_policy_file "+badPolicy+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(withNone, []byte("qos TRUE\nqos_policy_file "+filepath.Join(dir, "nopolicy")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-P", bad}, {"-qos", bad}, {"-partitions", filepath.Join(dir, "none")}, {"-qos", withBad}, {"-qos", withNone}} {
		err := runSMCmd(context.Background(), append(args, "-ibsim", "nowhere-"+t.Name()), io.Discard)
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("softrdma sm %q: %v, want an error naming the file", args, err)
		}
	}
}
