package sa

// The end-to-end test: softrdma's fabric, served to Linux tools by
// fabric/ibsim's server, is swept once by OpenSM (ibsim-run opensm -o:
// LIDs, LFTs, ports Active); a Subnet snapshot is read back from the
// fabric's nodes; this package's SA is attached at OpenSM's port through a
// small Transport over fabric.Attach; and saquery from infiniband-diags,
// run at another HCA through libumad2sim, reads every kind of record. What
// saquery prints is checked field by field against the snapshot. It runs
// with SOFTRDMA_IBSIM_E2E set (CI installs the Debian packages).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// fabricTransport is an sm.Transport over a client attached to a fabric
// port: what the SA sends goes out through the client, SA MADs the port
// receives go to handle.
type fabricTransport struct {
	c      *fabric.Client
	handle atomic.Pointer[func(*sm.Datagram)]
}

func attachSA(t *testing.T, f *fabric.Fabric, n *fabric.Node, port int) *fabricTransport {
	t.Helper()
	tr := &fabricTransport{}
	c, err := f.Attach(n, port, func(d *fabric.Datagram) {
		h := tr.handle.Load()
		if h == nil || len(d.MAD) != mad.Size || mad.Class(d.MAD[1]) != mad.ClassSubnAdm {
			return
		}
		(*h)(&sm.Datagram{SLID: d.SLID, DLID: d.DLID, SQP: d.SQP, DQP: d.DQP, SL: d.SL, PKey: d.PKey,
			QKey: d.QKey, Status: d.Status, MAD: d.MAD})
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.c = c
	return tr
}

func (x *fabricTransport) Send(d *sm.Datagram) error {
	return x.c.Send(&fabric.Datagram{SLID: d.SLID, DLID: d.DLID, SQP: d.SQP, DQP: d.DQP, SL: d.SL, PKey: d.PKey,
		QKey: d.QKey, MAD: d.MAD})
}

func (x *fabricTransport) Recv(ctx context.Context) (*sm.Datagram, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (x *fabricTransport) Close() error { return x.c.Close() }

// fabricSubnet reads the Subnet an SM would publish from the fabric's
// nodes: their NodeInfo, NodeDescription, SwitchInfo, LFT, PortInfo and
// first P_Key block, and the links the topology gives between ports whose
// link is up.
func fabricSubnet(t *testing.T, f *fabric.Fabric, topo *fabric.Topology) *sm.Subnet {
	t.Helper()
	q := func(n *fabric.Node, a mad.AttributeID, mod uint32) []byte {
		b, err := f.Query(n, a, mod)
		if err != nil {
			t.Fatalf("%s: %v", n.Name(), err)
		}
		return b
	}
	s := &sm.Subnet{Sweep: 1}
	byID := map[string]*sm.Node{}
	for _, fn := range f.Nodes() {
		n := &sm.Node{}
		n.Info, _ = mad.ParseNodeInfo(q(fn, mad.SMAttrNodeInfo, 0))
		nd, _ := mad.ParseNodeDescription(q(fn, mad.SMAttrNodeDescription, 0))
		n.Desc = nd.Description
		n.Ports = make([]*sm.Port, fn.NumPorts()+1)
		first := 1
		if n.Info.NodeType == mad.NodeTypeSwitch {
			si, _ := mad.ParseSwitchInfo(q(fn, mad.SMAttrSwitchInfo, 0))
			n.Switch = &si
			first = 0
			for blk := 0; blk*64 <= int(si.LinearFDBTop); blk++ {
				lft, _ := mad.ParseLinearFT(q(fn, mad.SMAttrLinearFT, uint32(blk)))
				n.LFT = append(n.LFT, lft.Port[:]...)
			}
			n.LFT = n.LFT[:int(si.LinearFDBTop)+1]
		}
		for i := first; i <= fn.NumPorts(); i++ {
			pi, _ := mad.ParsePortInfo(q(fn, mad.SMAttrPortInfo, uint32(i)))
			p := &sm.Port{Node: n, Num: i, GUID: fn.PortGUID(i), Info: pi}
			if n.Switch == nil || i == 0 {
				pk, err := f.Query(fn, mad.SMAttrPKeyTable, mad.PKeyTableModifier(0, 0))
				if err == nil {
					tbl, _ := mad.ParsePKeyTable(pk)
					for _, k := range tbl.PKey {
						if k&0x7fff != 0 {
							p.PKeys = append(p.PKeys, k)
						}
					}
				}
			}
			n.Ports[i] = p
		}
		byID[fn.Name()] = n
		s.Nodes = append(s.Nodes, n)
	}
	for _, tn := range topo.Nodes {
		n := byID[tn.ID]
		if n == nil {
			t.Fatalf("topology node %s is not in the fabric", tn.ID)
		}
		for i, tp := range tn.Ports {
			if i == 0 || tp.Remote == "" {
				continue
			}
			p, r := n.Ports[i], byID[tp.Remote].Ports[tp.RemotePort]
			if p.Info.PortPhysicalState == mad.PhysStateLinkUp && r.Info.PortPhysicalState == mad.PhysStateLinkUp {
				p.Remote = r
			}
		}
	}
	for _, p := range endPorts(s) {
		if p.Info.GIDPrefix != 0 {
			s.Prefix, s.SMLID = p.Info.GIDPrefix, p.Info.MasterSMLID
			break
		}
	}
	s.Index()
	return s
}

func runSaquery(t *testing.T, sock, host string, args ...string) string {
	t.Helper()
	for run := 1; ; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "ibsim-run", append([]string{"saquery"}, args...)...)
		cmd.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock, "SIM_HOST="+host)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			return string(out)
		}
		// saquery under libumad2sim died on a signal once in CI ("saquery
		// -g: signal: segmentation fault"), not reproduced in 40 runs
		// since, loaded or not. A second crash, or any other failure,
		// fails the test; a first one is logged and the query asked again.
		var ee *exec.ExitError
		if run == 1 && errors.As(err, &ee) && ctx.Err() == nil {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Logf("saquery %s died on %v; asking again:\n%s", strings.Join(args, " "), ws.Signal(), out)
				continue
			}
		}
		t.Fatalf("saquery %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// dumps splits saquery's output into records: "<Name> dump:" followed by
// "key....value" lines.
func dumps(out, name string) []map[string]string {
	var recs []map[string]string
	var cur map[string]string
	re := regexp.MustCompile(`^\s*([A-Za-z_0-9]+):?\.{2,}(.*)$`)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, name+" dump:") {
			cur = map[string]string{}
			recs = append(recs, cur)
			continue
		}
		if m := re.FindStringSubmatch(l); m != nil && cur != nil {
			cur[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return recs
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.Fields(s)[0], 0, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}

func TestE2ESaquery(t *testing.T) {
	if os.Getenv("SOFTRDMA_IBSIM_E2E") == "" {
		t.Skip("SOFTRDMA_IBSIM_E2E is not set (CI sets it)")
	}
	for _, bin := range []string{"ibsim-run", "opensm", "saquery"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("SOFTRDMA_IBSIM_E2E is set but %s is not installed", bin)
		}
	}
	path := filepath.Join("..", "..", "fabric", "testdata", "net.2sw2path4hca")
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.ParseTopology(fh, path)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	fab, err := fabric.New(topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	sock := fmt.Sprintf("softrdma-sa-%d", os.Getpid())
	srv, err := ibsim.NewServer(ibsim.FabricBackend(fab), ibsim.Config{SockName: sock,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	defer func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ibsim.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()

	// One OpenSM sweep from Hca1: LIDs, LFTs, every port Active.
	cache := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	osm := exec.CommandContext(ctx, "ibsim-run", "opensm", "-o", "-f", filepath.Join(cache, "opensm.log"))
	osm.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock, "SIM_HOST=Hca1", "OSM_CACHE_DIR="+cache, "OSM_TMP_DIR="+cache)
	osm.Dir = cache
	if out, err := osm.CombinedOutput(); err != nil {
		lb, _ := os.ReadFile(filepath.Join(cache, "opensm.log"))
		t.Fatalf("opensm -o: %v\n%s\n%s", err, out, lb)
	}
	s := fabricSubnet(t, fab, topo)
	readTables(t, fab, s)
	s.SMKey = 1 // OpenSM's default SA key, for the P_KeyTableRecords

	// The SA at OpenSM's port.
	hca1 := fab.NodeByName("Hca1")
	tr := attachSA(t, fab, hca1, 1)
	defer tr.Close()
	var mcasts atomic.Int32
	// saquery under libumad2sim does not acknowledge RMPP segments, and a
	// segment sent again after it exits reaches the next saquery at the
	// same port, whose libumad2sim takes it for its own (and may crash):
	// the transfers wait longer than the test runs.
	sa, err := New(&fixedSource{s: s}, tr, Config{RMPPTimeout: 10 * time.Minute,
		Multicast: func(uint16, []*sm.Port) { mcasts.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	h := sa.Handle
	tr.handle.Store(&h)

	// libumad2sim carries one 256-byte MAD per answer, without RMPP and
	// without its length: saquery sees the first segment of a table and
	// counts 200/stride records in it, the ones past the answer's being
	// padding (zero, or whatever its buffer held). So saquery asks for one
	// record at a time and the test checks the first record(s) it prints.
	host := "Hca2"
	var asked []query
	for _, p := range endPorts(s) {
		if p.LID() == 0 {
			continue // a CA port without a link
		}
		lid := strconv.Itoa(int(p.LID()))
		recs := dumps(runSaquery(t, sock, host, "NodeRecord", lid), "NodeRecord")
		checkNodeRecord(t, p, recs)
		asked = append(asked, query{[]string{"NodeRecord", lid}, "NodeRecord", recs[0]})
	}
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p == nil || p.LID() == 0 {
				continue
			}
			arg := fmt.Sprintf("%d/%d", p.LID(), p.Num)
			checkPortInfoRecord(t, p, dumps(runSaquery(t, sock, host, "PortInfoRecord", arg), "PortInfoRecord"))
			if p.Remote != nil {
				recs := dumps(runSaquery(t, sock, host, "LinkRecord", arg), "LinkRecord")
				checkLinkRecord(t, p, recs)
				asked = append(asked, query{[]string{"LinkRecord", arg}, "LinkRecord", recs[0]})
			}
		}
		if n.Switch != nil {
			lid := strconv.Itoa(int(n.Ports[0].LID()))
			checkSwitchInfoRecord(t, n, dumps(runSaquery(t, sock, host, "SWIR", lid), "SwitchInfoRecord"))
		}
	}
	cas := caPorts(s)
	for _, a := range cas {
		for _, b := range cas {
			if a == b {
				continue
			}
			args := []string{"-p", "--slid", strconv.Itoa(int(a.LID())), "--dlid", strconv.Itoa(int(b.LID()))}
			recs := dumps(runSaquery(t, sock, host, args...), "PathRecord")
			checkPathRecord(t, s, a, b, recs)
			asked = append(asked, query{args, "PathRecord", recs[0]})
		}
	}
	a := cas[0]

	// A group joined by two ports (as IPoIB would), then saquery -g.
	mgid := mad.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 1}
	c := newClient(t, sa, newMemTransport(1, 0), a.LID())
	for _, p := range cas[:2] {
		q := mad.MCMemberRecord{MGID: mgid, PortGID: mad.MakeGID(s.Prefix, p.GUID), JoinState: mad.JoinFullMember,
			QKey: 0x0b1b, PKey: 0xffff}
		b := make([]byte, mad.Size)
		c.tid++
		m, _ := mad.NewSAMAD(b, mad.MethodSet, mad.SAAttrMCMemberRecord, c.tid, &mad.SAHeader{ComponentMask: mad.MCMemberRecCompMGID |
			mad.MCMemberRecCompPortGID | mad.MCMemberRecCompJoinState | mad.MCMemberRecCompQKey | mad.MCMemberRecCompPKey})
		q.Encode(m.Data())
		sa.Handle(&sm.Datagram{SLID: p.LID(), DLID: s.SMLID, SQP: 1, DQP: 1, PKey: 0xffff, QKey: mad.GSIQKey, MAD: b})
	}
	if mcasts.Load() != 2 {
		t.Errorf("Multicast hook called %d times", mcasts.Load())
	}
	out := runSaquery(t, sock, host, "-g")
	t.Logf("saquery -g:\n%s", out)
	checkGroups(t, sa, dumps(out, "MCMemberRecord group"))
	if st := sa.Stats(); st.Errors != 0 || st.Requests < 50 {
		t.Errorf("SA stats %+v", st)
	}

	tables := askTables(t, sock, host, s)

	// OpenSM's own SA on Linux ibsim, same topology, same queries: the
	// records must read the same (but NodeInfo's Revision, ibsim's 0xA1).
	compareOpenSM(t, path, host, asked, func(sock string) { compareTables(t, sock, host, tables) })
}

// query is one saquery run and the first record it printed.
type query struct {
	args []string
	name string
	rec  map[string]string
}

// compareOpenSM runs Linux ibsim on the topology with OpenSM as a daemon
// at Hca1 and asks its SA the same queries.
func compareOpenSM(t *testing.T, netfile, host string, asked []query, more ...func(sock string)) {
	t.Helper()
	bin, err := exec.LookPath("ibsim")
	if err != nil {
		t.Fatal("SOFTRDMA_IBSIM_E2E is set but ibsim is not installed")
	}
	abs, _ := filepath.Abs(netfile)
	sock := fmt.Sprintf("softrdma-sa-ibsim-%d", os.Getpid())
	dir := t.TempDir()
	sim := exec.Command(bin, "-s", "-n", "-f", filepath.Join(dir, "ibsim.log"), abs)
	sim.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock)
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sim.Process.Kill(); sim.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := ibsim.Dial(ctx, ibsim.ClientConfig{SockName: sock, ID: uint32(os.Getpid())*16 + 7})
		cancel()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ibsim did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	osm := exec.CommandContext(ctx, "ibsim-run", "opensm", "-f", filepath.Join(dir, "opensm.log"))
	osm.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock, "SIM_HOST=Hca1", "OSM_CACHE_DIR="+dir, "OSM_TMP_DIR="+dir)
	osm.Dir = dir
	if err := osm.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() { cancel(); osm.Wait() }()
	// The SA answers PathRecords once the subnet is up.
	last := asked[len(asked)-1]
	for deadline = time.Now().Add(60 * time.Second); ; {
		out, err := trySaquery(sock, host, last.args...)
		if err == nil && len(dumps(out, last.name)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			lb, _ := os.ReadFile(filepath.Join(dir, "opensm.log"))
			t.Fatalf("OpenSM's SA on ibsim does not answer %v: %v\n%s\n--- log:\n%s", last.args, err, out, lb)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// What differs between the two fabrics' nodes, not between the SAs:
	// ibsim's NodeInfo Revision (0xA1) and switch PartitionCap (8), and
	// its ports' MTU (2048, softrdma's 4096), which OpenSM's paths take
	// as ours take our ports'.
	pir := dumps(runSaquery(t, sock, host, "PortInfoRecord", "1/1"), "PortInfoRecord")
	if len(pir) == 0 {
		t.Fatal("OpenSM: no PortInfoRecord 1/1")
	}
	ibsimMTU := uint64(0)
	for m := num(t, pir[0]["NeighborMTU"]); m > 128; m >>= 1 {
		ibsimMTU++
	}
	for _, q := range asked {
		out := runSaquery(t, sock, host, q.args...)
		recs := dumps(out, q.name)
		if len(recs) == 0 {
			t.Errorf("OpenSM: saquery %v printed no record:\n%s", q.args, out)
			continue
		}
		for k, want := range recs[0] {
			switch {
			case k == "revision" || k == "partition_cap":
				continue
			case q.name == "PathRecord" && k == "mtu":
				if n := num(t, want); n != mad.SelectExactly<<6|ibsimMTU {
					t.Errorf("OpenSM: saquery %v: mtu %s, ibsim's ports have %d", q.args, want, ibsimMTU)
				}
				continue
			}
			if got := q.rec[k]; got != want {
				t.Errorf("saquery %v: %s is %q from our SA, %q from OpenSM's", strings.Join(q.args, " "), k, got, want)
			}
		}
	}
	t.Logf("%d records compared with OpenSM's SA", len(asked))
	for _, f := range more {
		f(sock)
	}
}

func trySaquery(sock, host string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ibsim-run", append([]string{"saquery"}, args...)...)
	cmd.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock, "SIM_HOST="+host)
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}
