package verbs

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/pcap"
	"github.com/softrdma/softrdma/wire"
)

// TestSendWithInvTshark captures the packets of a two-packet SEND_WITH_INV
// the engine sends and has tshark decode them: the last is RC
// SEND_LAST_WITH_INVALIDATE (opcode 22) with the window's R_Key in its IETH,
// the first a plain SEND_FIRST, and tshark finds nothing malformed.
func TestSendWithInvTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed")
	}
	p := newPair(t, pairOpts{})
	path := filepath.Join(t.TempDir(), "inv.pcap")
	w, err := pcap.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	f := p.net.Faults()
	f.Filter = func(lp *link.Packet) bool {
		if pkt, err := wire.Parse(lp.Data()); err == nil && pkt.Info().Is(wire.FlagSend) {
			mu.Lock()
			defer mu.Unlock()
			if err := w.WritePacket(lp.Src, lp.Dst, bytes.Clone(lp.Data())); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	p.net.SetFaults(f)

	mr := regBind(t, p.pb, 4096, AccessLocalWrite|AccessRemoteWrite)
	mw := allocMW(t, p.pb, MWType2)
	key := nextKey(mw.RKey())
	post(t, p.qb, SendWR{ID: 1, Opcode: WRBindMW, MW: mw, RKey: key, Bind: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}})
	recv := p.reg(p.pb, 4096)
	postRecv(t, p.qb, RecvWR{ID: 2, SGL: []SGE{recv.SGE(0, 4096)}})
	local := p.reg(p.pa, 4096)
	post(t, p.qa, SendWR{ID: 3, Opcode: WRSendWithInv, Flags: SendSignaled, SGL: []SGE{local.SGE(0, 1500)}, InvRKey: key})
	wantWC(t, oneWC(t, p.ca), 3, WCSend, Success)
	if wc := oneWC(t, p.cb); wc.Flags&WCWithInv == 0 || wc.InvalidatedRKey != key {
		t.Fatalf("receive completion %+v", wc)
	}
	mu.Lock()
	err = w.Close()
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", path, "-T", "fields",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.ieth", "-e", "_ws.malformed").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.Contains(line, "Running as") {
			lines = append(lines, line)
		}
	}
	// Opcode, IETH (tshark 4.0 shows the R_Key as hex, once per place it
	// decodes it), malformed mark (none).
	if len(lines) != 2 {
		t.Fatalf("tshark decoded %q, want two packets", lines)
	}
	if lines[0] != "0\t\t" && lines[0] != "0" {
		t.Errorf("first packet: tshark %q, want SEND_FIRST (0) without IETH", lines[0])
	}
	g := strings.Split(lines[1], "\t")
	if g[0] != "22" || len(g) < 2 || len(g) > 2 && g[2] != "" {
		t.Fatalf("last packet: tshark %q, want SEND_LAST_WITH_INVALIDATE (22), not malformed", lines[1])
	}
	hex := fmt.Sprintf("%08x", uint32(key))
	for _, v := range strings.Split(g[1], ",") {
		if strings.ReplaceAll(v, ":", "") != hex {
			t.Errorf("IETH as tshark decodes it: %q, want %s", g[1], hex)
		}
	}
}
