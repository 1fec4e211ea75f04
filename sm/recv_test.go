package sm

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// fakeTransport hands the Manager what a test puts in in, and records
// what it sends.
type fakeTransport struct {
	in   chan *Datagram
	sent chan *Datagram
	done chan struct{}
}

func newFake() *fakeTransport {
	return &fakeTransport{in: make(chan *Datagram, 16), sent: make(chan *Datagram, 16), done: make(chan struct{})}
}

func (f *fakeTransport) Send(d *Datagram) error {
	f.sent <- d
	return nil
}

func (f *fakeTransport) Recv(ctx context.Context) (*Datagram, error) {
	select {
	case d := <-f.in:
		return d, nil
	case <-f.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeTransport) Close() error {
	close(f.done)
	return nil
}

func (f *fakeTransport) next(t *testing.T) *Datagram {
	t.Helper()
	select {
	case d := <-f.sent:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("nothing sent")
		return nil
	}
}

// A trap 128 is repressed (same TID, back to its issuer) and asks for a
// heavy sweep.
func TestTrapRepress(t *testing.T) {
	ft := newFake()
	m, err := New(ft, Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := make([]byte, mad.Size)
	s, _ := mad.NewLIDRoutedSMP(b, mad.MethodTrap, mad.SMAttrNotice, 0, 0x1234)
	nt := mad.Notice{IsGeneric: true, Type: mad.NoticeTypeUrgent, ProducerType: mad.NodeTypeSwitch,
		TrapNumber: mad.TrapLinkStateChange, IssuerLID: 7}
	nt.SetTrap128(7)
	nt.Encode(s.Data())
	ft.in <- &Datagram{SLID: 7, DLID: 1, MAD: b}
	r := ft.next(t)
	rm := mad.MAD(r.MAD)
	if rm.Method() != mad.MethodTrapRepress || rm.TransactionID() != 0x1234 || r.DLID != 7 || rm.MgmtClass() != mad.ClassSubnLID {
		t.Errorf("repress: method %v TID %#x DLID %d class %v", rm.Method(), rm.TransactionID(), r.DLID, rm.MgmtClass())
	}
	select {
	case <-m.trap:
	case <-time.After(5 * time.Second):
		t.Error("no heavy sweep asked for")
	}
	if st := m.Stats(); st.Traps != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Another SM's directed-route SMInfo Get is answered with this SM's
// SMInfo, as a directed-route response; Set STANDBY moves it to STANDBY.
func TestSMInfoAnswer(t *testing.T) {
	ft := newFake()
	m, err := New(ft, Config{Logger: quiet, Priority: 11, SMKey: 0x55})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.mu.Lock()
	m.guid = 0xabc
	m.mu.Unlock()
	for _, tc := range []struct {
		key  uint64
		want uint64
	}{{0, 0}, {0x55, 0x55}} {
		b := make([]byte, mad.Size)
		s, _ := mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrSMInfo, 0, 9, []byte{0, 1, 3})
		s.SetHopPointer(3)
		req := mad.SMInfo{SMKey: tc.key}
		req.Encode(s.Data())
		ft.in <- &Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b}
		r := mad.SMP(ft.next(t).MAD)
		x, _ := mad.ParseSMInfo(r.Data())
		if !r.Direction() || r.MAD().Method() != mad.MethodGetResp || r.Status() != 0 || r.HopPointer() != 3 ||
			x.GUID != 0xabc || x.Priority != 11 || x.SMState != mad.SMStateDiscovering || x.SMKey != tc.want {
			t.Errorf("answer: D %v method %v status %#x hop %d SMInfo %+v", r.Direction(), r.MAD().Method(), r.Status(), r.HopPointer(), x)
		}
	}
	b := make([]byte, mad.Size)
	mad.NewLIDRoutedSMP(b, mad.MethodSet, mad.SMAttrSMInfo, smStandby, 10)
	ft.in <- &Datagram{SLID: 3, DLID: 1, MAD: b}
	r := ft.next(t)
	if x, _ := mad.ParseSMInfo(mad.SMP(r.MAD).Data()); x.SMState != mad.SMStateStandby || r.DLID != 3 || m.State() != mad.SMStateStandby {
		t.Errorf("after Set STANDBY: %+v to LID %d, state %d", x, r.DLID, m.State())
	}
}

// Malformed datagrams, responses nobody awaits and MADs of other classes
// are dropped and counted; the receive goroutine goes on.
func TestRecvDrops(t *testing.T) {
	ft := newFake()
	got := make(chan *Datagram, 1)
	m, err := New(ft, Config{Logger: quiet, GMP: func(d *Datagram) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	short := &Datagram{MAD: make([]byte, 100)}
	resp := make([]byte, mad.Size)
	s, _ := mad.NewDirectedSMP(resp, mad.MethodGetResp, mad.SMAttrNodeInfo, 0, 99, []byte{0})
	s.SetDirection(true)
	perf := make([]byte, mad.Size)
	perf[0], perf[1], perf[3] = 1, byte(mad.ClassPerf), byte(mad.MethodGet)
	for _, d := range []*Datagram{short, {MAD: resp}, {MAD: perf}} {
		ft.in <- d
	}
	sa := make([]byte, mad.Size)
	sa[0], sa[1], sa[2], sa[3] = 1, byte(mad.ClassSubnAdm), 2, byte(mad.MethodGet)
	ft.in <- &Datagram{SLID: 4, DQP: 1, MAD: sa}
	select {
	case d := <-got:
		if d.SLID != 4 {
			t.Errorf("GMP %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the SA GMP was not handed over")
	}
	if st := m.Stats(); st.Unclaimed != 3 || st.GMPs != 1 {
		t.Errorf("stats %+v", st)
	}
}

// An SMP nobody answers is resent Retries times, then fails with
// ErrTimeout.
func TestSMPTimeout(t *testing.T) {
	ft := newFake()
	m, err := New(ft, Config{Logger: quiet, Timeout: 10 * time.Millisecond, Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.smp(context.Background(), []byte{1}, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil); !errorsIs(err, ErrTimeout) {
		t.Fatalf("smp: %v", err)
	}
	tids := map[uint64]bool{}
	for range 3 {
		tids[mad.MAD(ft.next(t).MAD).TransactionID()] = true
	}
	if st := m.Stats(); len(tids) != 3 || st.Sent != 3 || st.Retries != 2 || st.Timeouts != 1 {
		t.Errorf("%d TIDs, stats %+v", len(tids), st)
	}
	// The Manager's Sweep fails the same way when its own node is silent.
	if err := m.Sweep(context.Background()); !errorsIs(err, ErrTimeout) {
		t.Errorf("Sweep: %v", err)
	}
}
