package verbs

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestInlineWithoutKey sends a message from SendWR.Inline: no registered
// memory and no lkey on the sending side, as libibverbs allows.
func TestInlineWithoutKey(t *testing.T) {
	p := newPair(t, pairOpts{})
	mb := p.reg(p.pb, 128)
	if err := p.qb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 128)}}}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("inline, no key")
	if err := p.qa.PostSend([]SendWR{{ID: 2, Opcode: WRSend, Flags: SendSignaled, Inline: msg}}); err != nil {
		t.Fatal(err)
	}
	clear(msg) // the data was copied at post time
	wc := waitWC(t, p.cb, 1, 10*time.Second)[0]
	if err := wc.Err(); err != nil || wc.ByteLen != 14 {
		t.Fatalf("receive: %+v %v", wc, err)
	}
	if got := string(mb.Buf()[:14]); got != "inline, no key" {
		t.Fatalf("received %q", got)
	}
	if wc := waitWC(t, p.ca, 1, 10*time.Second)[0]; wc.Err() != nil {
		t.Fatal(wc.Err())
	}

	ma := p.reg(p.pa, 8)
	for name, wr := range map[string]SendWR{
		"Inline and an SGL": {Opcode: WRSend, Inline: []byte{1}, SGL: []SGE{ma.SGE(0, 8)}},
		"Inline too long":   {Opcode: WRSend, Inline: make([]byte, 65)},
		"Inline READ":       {Opcode: WRRDMARead, Inline: make([]byte, 8)},
	} {
		if err := p.qa.PostSend([]SendWR{wr}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestAttrMaskNames checks that Modify's errors name the attributes.
func TestAttrMaskNames(t *testing.T) {
	if s := (AttrState | AttrPathMTU | 1<<30).String(); s != "AttrState|AttrPathMTU|0x40000000" {
		t.Errorf("String: %q", s)
	}
	if s := AttrMask(0).String(); s != "0" {
		t.Errorf("empty mask: %q", s)
	}
	_, da, _ := newDevicesLoop(t, &pairOpts{})
	pd, _ := da.AllocPD()
	cq, _ := da.CreateCQ(4, nil)
	qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	err = qp.Modify(&QPAttr{State: StateInit}, AttrState|AttrPort)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "missing AttrAccessFlags|AttrPKeyIndex") {
		t.Errorf("RESET -> INIT without keys: %v", err)
	}
	err = qp.Modify(&QPAttr{State: StateInit}, AttrState|AttrPort|AttrPKeyIndex|AttrAccessFlags|AttrSQPSN)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "does not take AttrSQPSN") {
		t.Errorf("RESET -> INIT with an SQ PSN: %v", err)
	}
}
