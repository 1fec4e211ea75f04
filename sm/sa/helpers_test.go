package sa

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

const testPrefix = 0xfe80000000000000

// topoSubnet builds the Subnet an SM would publish for a topology of
// fabric/testdata: every port Active with a 4x link at the topology's
// speed, LIDs given in node order (switch port 0, then each linked CA
// port; lmc to every CA port), and min-hop LFTs computed by a breadth-first
// search from each LID.
func topoSubnet(t testing.TB, name string, lmc uint8) *sm.Subnet {
	t.Helper()
	path := filepath.Join("..", "..", "fabric", "testdata", name)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topo, err := fabric.ParseTopology(f, path)
	if err != nil {
		t.Fatal(err)
	}
	s := &sm.Subnet{Prefix: testPrefix, SMKey: 0, Sweep: 1}
	byID := map[string]*sm.Node{}
	for _, tn := range topo.Nodes {
		n := &sm.Node{Desc: tn.Desc, Info: mad.NodeInfo{BaseVersion: 1, ClassVersion: 1, NodeType: tn.Type,
			NumPorts: uint8(tn.NumPorts()), SystemImageGUID: tn.SysGUID, NodeGUID: tn.GUID, PortGUID: tn.GUID,
			PartitionCap: 16, DeviceID: tn.DeviceID, VendorID: tn.VendorID, LocalPortNum: 1}}
		n.Ports = make([]*sm.Port, tn.NumPorts()+1)
		if tn.Type == mad.NodeTypeSwitch {
			n.Switch = &mad.SwitchInfo{LinearFDBCap: 0xc000, MulticastFDBCap: 0x400, LifeTimeValue: 18,
				EnhancedPort0: tn.ESP0 > 0}
			n.Info.LocalPortNum = 0
			n.Ports[0] = &sm.Port{Node: n, Num: 0, GUID: tn.GUID, Info: activeInfo(0)}
		}
		for i := 1; i <= tn.NumPorts(); i++ {
			g := tn.GUID
			if tn.Type != mad.NodeTypeSwitch {
				g = tn.GUID + uint64(i)
			}
			n.Ports[i] = &sm.Port{Node: n, Num: i, GUID: g, Info: activeInfo(i)}
		}
		if tn.Type != mad.NodeTypeSwitch {
			n.Info.PortGUID = tn.GUID + 1
		}
		byID[tn.ID] = n
		s.Nodes = append(s.Nodes, n)
	}
	for _, tn := range topo.Nodes {
		n := byID[tn.ID]
		for i, tp := range tn.Ports {
			if i == 0 || tp.Remote == "" || n.Ports[i] == nil {
				continue
			}
			r := byID[tp.Remote]
			n.Ports[i].Remote = r.Ports[tp.RemotePort]
		}
	}
	lid := uint16(1)
	for _, n := range s.Nodes {
		if n.Switch != nil {
			n.Ports[0].Info.LID = lid
			lid++
			continue
		}
		for _, p := range n.Ports[1:] {
			if p.Remote == nil {
				p.Info.PortState, p.Info.PortPhysicalState = mad.PortStateDown, mad.PhysStatePolling
				continue
			}
			p.Info.LID, p.Info.LMC = lid, lmc
			lid += 1 << lmc
		}
	}
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p != nil {
				p.Info.GIDPrefix = testPrefix
				p.Info.MasterSMLID = 1
			}
		}
	}
	s.SMLID = 1
	s.Index()
	fillLFTs(s, lid)
	return s
}

func activeInfo(num int) mad.PortInfo {
	return mad.PortInfo{LocalPortNum: uint8(num), LinkWidthEnabled: 3, LinkWidthSupported: 3,
		LinkWidthActive: mad.LinkWidth4X, LinkSpeedSupported: 1, PortState: mad.PortStateActive,
		PortPhysicalState: mad.PhysStateLinkUp, LinkSpeedActive: mad.LinkSpeedSDR, LinkSpeedEnabled: 1,
		NeighborMTU: mad.MTU4096, MTUCap: mad.MTU4096, VLCap: 4, OperationalVLs: 4}
}

// fillLFTs gives every switch a min-hop LFT for LIDs below top.
func fillLFTs(s *sm.Subnet, top uint16) {
	for _, n := range s.Nodes {
		if n.Switch != nil {
			n.LFT = make([]uint8, top)
			for i := range n.LFT {
				n.LFT[i] = 0xff
			}
			n.Switch.LinearFDBTop = top - 1
		}
	}
	for l := uint16(1); l < top; l++ {
		dst := s.PortByLID(l)
		if dst == nil {
			continue
		}
		// BFS backwards from the destination's node over switches.
		dist := map[*sm.Node]int{dst.Node: 0}
		queue := []*sm.Node{dst.Node}
		if dst.Node.Switch != nil {
			dst.Node.LFT[l] = 0
		} else {
			// The CA's switch forwards by the port that leads to dst.
			queue = nil
			if r := dst.Remote; r != nil && r.Node.Switch != nil {
				r.Node.LFT[l] = uint8(r.Num)
				dist[r.Node] = 1
				queue = append(queue, r.Node)
			}
		}
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			for _, p := range n.Ports {
				if p == nil || p.Num == 0 || p.Remote == nil || p.Remote.Node.Switch == nil {
					continue
				}
				m := p.Remote.Node
				if _, seen := dist[m]; seen {
					continue
				}
				dist[m] = dist[n] + 1
				m.LFT[l] = uint8(p.Remote.Num)
				queue = append(queue, m)
			}
		}
	}
}

type fixedSource struct {
	mu sync.Mutex
	s  *sm.Subnet
}

func (f *fixedSource) Subnet() *sm.Subnet { f.mu.Lock(); defer f.mu.Unlock(); return f.s }

// memTransport is an in-memory Transport: what the server sends goes to
// out, dropped first with probability loss (seeded).
type memTransport struct {
	mu    sync.Mutex
	out   chan *sm.Datagram
	rng   *rand.Rand
	loss  float64
	drops int
}

func newMemTransport(seed uint64, loss float64) *memTransport {
	return &memTransport{out: make(chan *sm.Datagram, 4096), rng: rand.New(rand.NewPCG(seed, 1)), loss: loss}
}

func (m *memTransport) Send(d *sm.Datagram) error {
	m.mu.Lock()
	drop := m.loss > 0 && m.rng.Float64() < m.loss
	if drop {
		m.drops++
	}
	m.mu.Unlock()
	if !drop {
		cp := *d
		cp.MAD = append([]byte(nil), d.MAD...)
		m.out <- &cp
	}
	return nil
}

func (m *memTransport) Recv(ctx context.Context) (*sm.Datagram, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (m *memTransport) Close() error { return nil }

// client plays saquery and the Linux MAD layer's RMPP receiver against a
// Server.
type client struct {
	t      testing.TB
	srv    *Server
	tr     *memTransport
	lid    uint16
	tid    uint64
	window uint32
	// ackLoss drops the client's ACKs (seeded).
	ackLoss float64
	rng     *rand.Rand
	acks    int
	smKey   uint64 // the SM_Key requests carry
}

func newClient(t testing.TB, srv *Server, tr *memTransport, lid uint16) *client {
	return &client{t: t, srv: srv, tr: tr, lid: lid, window: 4, rng: rand.New(rand.NewPCG(7, 7))}
}

// request sends one SA request and returns the MAD.
func (c *client) request(method mad.Method, attr mad.AttributeID, mask uint64, rec []byte) {
	c.tid++
	b := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(b, method, attr, c.tid, &mad.SAHeader{SMKey: c.smKey, ComponentMask: mask})
	copy(m.Data(), rec)
	c.srv.Handle(&sm.Datagram{SLID: c.lid, DLID: 1, SQP: 1, DQP: 1, PKey: 0xffff, QKey: mad.GSIQKey, MAD: b})
}

func (c *client) recv() mad.SAMAD {
	c.t.Helper()
	select {
	case d := <-c.tr.out:
		if d.DLID != c.lid || d.DQP != 1 || d.QKey != mad.GSIQKey {
			c.t.Fatalf("answer addressed to LID %d QP %d Q_Key %#x", d.DLID, d.DQP, d.QKey)
		}
		m, err := mad.ParseSA(d.MAD)
		if err != nil {
			c.t.Fatal(err)
		}
		return m
	case <-time.After(10 * time.Second):
		c.t.Fatal("no answer")
	}
	return nil
}

// get sends a Get (or Set, Delete) and returns the status and the record.
func (c *client) get(method mad.Method, attr mad.AttributeID, mask uint64, rec []byte) (uint16, []byte) {
	c.t.Helper()
	c.request(method, attr, mask, rec)
	m := c.recv()
	if m.MAD().TransactionID() != c.tid {
		c.t.Fatalf("answer TID %d, want %d", m.MAD().TransactionID(), c.tid)
	}
	want := map[mad.Method]mad.Method{mad.MethodGet: mad.MethodGetResp, mad.MethodSet: mad.MethodGetResp,
		mad.MethodDelete: mad.MethodDeleteResp}[method]
	if m.MAD().Method() != want {
		c.t.Fatalf("answer method %s, want %s", mad.SAMethodName(m.MAD().Method()), mad.SAMethodName(want))
	}
	return m.MAD().Status(), append([]byte(nil), m.Data()...)
}

func (c *client) ack(tmpl mad.SAMAD, seg, window uint32) {
	if c.ackLoss > 0 && c.rng.Float64() < c.ackLoss {
		return
	}
	c.acks++
	b := make([]byte, mad.Size)
	copy(b, tmpl[:mad.SADataOffset])
	m := mad.SAMAD(b)
	m.MAD().SetMethod(mad.MethodGetTable) // as Linux: the response bit flipped
	m.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeAck, RRespTime: mad.RMPPNoRespTime,
		Flags: mad.RMPPFlagActive, SegmentNumber: seg, Length: window})
	c.srv.Handle(&sm.Datagram{SLID: c.lid, DLID: 1, SQP: 1, DQP: 1, PKey: 0xffff, QKey: mad.GSIQKey, MAD: b})
}

// getTable sends a GetTable and reassembles the RMPP answer as the Linux
// MAD layer does: segments in order only, an ACK at the end of each window
// and for anything out of order, the window opened by c.window.
func (c *client) getTable(attr mad.AttributeID, mask uint64, rec []byte) (uint16, [][]byte) {
	c.t.Helper()
	c.request(mad.MethodGetTable, attr, mask, rec)
	return c.reassemble(mad.MethodGetTableResp)
}

// getMulti sends a GetMulti(MultiPathRecord) as one RMPP segment, checks
// the SA acknowledges it, and reassembles the answer as getTable does.
func (c *client) getMulti(mask uint64, rec []byte) (uint16, [][]byte) {
	c.t.Helper()
	b := make([]byte, mad.Size)
	c.tid++
	m, _ := mad.NewSAMAD(b, mad.MethodGetMulti, mad.SAAttrMultiPathRecord, c.tid, &mad.SAHeader{SMKey: c.smKey, ComponentMask: mask})
	m.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeData, RRespTime: mad.RMPPNoRespTime,
		Flags: mad.RMPPFlagActive | mad.RMPPFlagFirst | mad.RMPPFlagLast, SegmentNumber: 1, Length: mad.SAHeaderSize + uint32(len(rec))})
	copy(m.Data(), rec)
	c.srv.Handle(&sm.Datagram{SLID: c.lid, DLID: 1, SQP: 1, DQP: 1, PKey: 0xffff, QKey: mad.GSIQKey, MAD: b})
	ack := c.recv()
	if h := ack.RMPP(); h.Type != mad.RMPPTypeAck || h.SegmentNumber != 1 || ack.MAD().TransactionID() != c.tid {
		c.t.Fatalf("GetMulti: first answer %+v, not the ACK of its segment", h)
	}
	return c.reassemble(mad.MethodGetMultiResp)
}

// reassemble reads an RMPP answer of method want.
func (c *client) reassemble(want mad.Method) (uint16, [][]byte) {
	c.t.Helper()
	var payload []byte
	var expect, window uint32 = 1, 1
	var offset int
	var firstLen uint32 // the first segment's PayloadLength
	for {
		m := c.recv()
		if m.MAD().TransactionID() != c.tid {
			continue // a late segment of an earlier transfer
		}
		if m.MAD().Method() != want {
			c.t.Fatalf("answer method %s", mad.SAMethodName(m.MAD().Method()))
		}
		h := m.RMPP()
		if !h.Active() || h.Type != mad.RMPPTypeData {
			c.t.Fatalf("answer RMPP %+v", h)
		}
		if h.SegmentNumber != expect {
			c.ack(m, expect-1, window) // out of order or a repeat
			continue
		}
		if expect == 1 {
			offset = int(m.Header().AttributeOffset) * 8
			if h.Flags&mad.RMPPFlagFirst == 0 {
				c.t.Fatal("segment 1 without First")
			}
			firstLen = h.Length
		}
		last := h.Flags&mad.RMPPFlagLast != 0
		data := m.Data()
		if last {
			data = data[:int(h.Length)-mad.SAHeaderSize]
		}
		payload = append(payload, data...)
		if last {
			c.ack(m, expect, expect)
			st := m.MAD().Status()
			if st != mad.StatusOK {
				return st, nil
			}
			// The whole payload counting each segment's SA header, as
			// Linux counts it.
			if want := uint32(len(payload)) + expect*mad.SAHeaderSize; firstLen != want {
				c.t.Fatalf("first segment's PayloadLength %d, want %d for %d segments", firstLen, want, expect)
			}
			if len(payload) == 0 && offset != 0 {
				c.t.Fatalf("an empty table with AttributeOffset %d", offset)
			}
			if offset == 0 {
				if len(payload) != 0 {
					c.t.Fatal("AttributeOffset 0 with records")
				}
				return st, nil
			}
			var recs [][]byte
			for i := 0; i+offset <= len(payload); i += offset {
				recs = append(recs, payload[i:i+offset])
			}
			if len(payload)%offset != 0 {
				c.t.Fatalf("payload of %d bytes, records of %d", len(payload), offset)
			}
			return st, recs
		}
		if expect == window || expect == 1 {
			window = expect + c.window
			c.ack(m, expect, window)
		}
		expect++
	}
}

func newTestServer(t testing.TB, s *sm.Subnet, cfg Config) (*Server, *memTransport, *client) {
	t.Helper()
	tr := newMemTransport(1, 0)
	srv, err := New(&fixedSource{s: s}, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var lid uint16 = 1
	if s != nil {
		for _, p := range endPorts(s) {
			if p.Node.Switch == nil && p.LID() != 0 {
				lid = p.LID()
				break
			}
		}
	}
	return srv, tr, newClient(t, srv, tr, lid)
}

func enc[T interface{ Encode([]byte) }](x T, size int) []byte {
	b := make([]byte, mad.SADataSize)
	x.Encode(b[:size])
	return b
}
