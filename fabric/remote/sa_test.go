package remote

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/verbs"
)

// saChildMain is the test binary run as another process by
// TestSAFromProcess: a verbs device on Hca2's port at addr asks the SA,
// through cm's SA client, for the path to the LID in
// SOFTRDMA_REMOTE_SA_DLID, prints "path SLID DLID SL MTU" (or the error)
// and exits.
func saChildMain(addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fail := func(what string, err error) {
		fmt.Println(what+":", err)
		os.Exit(1)
	}
	dlid, err := strconv.Atoi(os.Getenv("SOFTRDMA_REMOTE_SA_DLID"))
	if err != nil {
		fail("DLID", err)
	}
	p, err := (&Dialer{Logger: quiet}).Dial(ctx, addr, "Hca2", 1)
	if err != nil {
		fail("dial", err)
	}
	l, err := ib.New(p)
	if err != nil {
		fail("link", err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "sa-child", Logger: quiet})
	if err != nil {
		fail("open", err)
	}
	defer d.Close()
	for {
		pa, err := d.QueryPort(1)
		if err == nil && pa.State == verbs.PortActive && pa.SMLID != 0 {
			break
		}
		if ctx.Err() != nil {
			fail("port", ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m, err := cm.New(d, &cm.Options{Logger: quiet})
	if err != nil {
		fail("cm", err)
	}
	defer m.Close()
	r, err := m.PathRecord(ctx, &cm.PathQuery{DLID: uint16(dlid)})
	if err != nil {
		fail("path", err)
	}
	fmt.Printf("path %d %d %d %d\n", r.SLID, r.DLID, r.SL, r.MTU)
}

// TestSAFromProcess: softrdma's SM and SA (sa.Attach) at Hca3 of a served
// fabric answer a PathRecord query that a verbs device in another process,
// on Hca2 through fabric/remote, sends with cm's SA client on the data
// plane: the fabric hands the query to the SA and puts the answer back on
// the data plane.
func TestSAFromProcess(t *testing.T) {
	s := serve(t, Config{})
	tr, err := sm.FabricTransport(s.f, s.f.NodeByName("Hca3"), 1)
	if err != nil {
		t.Fatal(err)
	}
	x, err := sa.Attach(tr, sm.Config{Logger: quiet, SweepInterval: time.Hour}, sa.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := x.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	sn := x.Subnet()
	lid2, lid4 := lidOf(t, s.f, sn, "Hca2"), lidOf(t, s.f, sn, "Hca4")

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOFTRDMA_REMOTE_SA_CHILD="+s.addr, "SOFTRDMA_REMOTE_SA_DLID="+strconv.Itoa(int(lid4)))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %q %v", line, err)
	}
	var slid, dlid, sl, mtu int
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "path %d %d %d %d", &slid, &dlid, &sl, &mtu); err != nil {
		t.Fatalf("child: %q", line)
	}
	if slid != int(lid2) || dlid != int(lid4) || mtu == 0 {
		t.Fatalf("PathRecord in the child: %q, want LIDs %d -> %d", line, lid2, lid4)
	}
	if st := s.f.DataStats(); st.ToClients == 0 || st.FromClients == 0 {
		t.Errorf("the query did not cross the bridge: %+v", st)
	}
}
