package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/verbs"
)

// ibDevice opens a device on one end of an InfiniBand cable whose port has
// LID 0x12, LMC 1, the SM at LID 3, in the given state.
func ibDevice(t *testing.T, state uint8) *verbs.Device {
	t.Helper()
	a := ib.DefaultAttr(0x12, 0x0002_c903_0000_abcd)
	a.LMC, a.SMLID, a.State = 1, 3, state
	if state != ib.StateActive {
		a.PhysState = ib.PhysPolling
	}
	ca, cb := ib.Cable(ib.CableConfig{A: a})
	cb.Close()
	l, err := ib.New(ca)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "ib0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDevinfoIB(t *testing.T) {
	for _, c := range []struct {
		state uint8
		lines []string
	}{
		{ib.StateActive, []string{"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tphys_state:\t\tLINK_UP (5)\n"}},
		{ib.StateInit, []string{"\t\t\tstate:\t\t\tPORT_INIT (2)\n", "\t\t\tphys_state:\t\tPOLLING (2)\n"}},
	} {
		var out bytes.Buffer
		if err := describeDevice(&out, "ib0", ibDevice(t, c.state), true, true); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		for _, want := range append(c.lines,
			"hca_id:\tib0\n",
			"\tnode_guid:\t\t\t0002:c903:0000:abcd\n",
			"\t\t\tsm_lid:\t\t\t3\n",
			"\t\t\tport_lid:\t\t18\n",
			"\t\t\tport_lmc:\t\t0x01\n",
			"\t\t\tlink_layer:\t\tInfiniBand\n",
			"\t\t\tGID[  0]:\t\tfe80::2:c903:0:abcd\n",
		) {
			if !strings.Contains(s, want) {
				t.Errorf("output lacks %q:\n%s", want, s)
			}
		}
		if strings.Contains(s, "udp_port") || strings.Contains(s, "RoCE") {
			t.Errorf("RoCE lines on an IB port:\n%s", s)
		}
	}
}

func TestIBStatIB(t *testing.T) {
	var out bytes.Buffer
	if err := writeIBStat(&out, "ib0", ibDevice(t, ib.StateArmed), true, false); err != nil {
		t.Fatal(err)
	}
	want := "CA 'ib0'\n\tCA type: softrdma\n\tNumber of ports: 1\n\tFirmware version: softrdma 0.1\n" +
		"\tHardware version: 0\n\tNode GUID: 0x0002c9030000abcd\n\tSystem image GUID: 0x0002c9030000abcd\n" +
		"\tPort 1:\n\t\tState: Armed\n\t\tPhysical state: Polling\n\t\tRate: 2.5\n\t\tBase lid: 18\n\t\tLMC: 1\n" +
		"\t\tSM lid: 3\n\t\tCapability mask: 0x00010000\n\t\tPort GUID: 0x0002c9030000abcd\n\t\tLink layer: InfiniBand\n"
	if out.String() != want {
		t.Errorf("ibstat:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestIBStatRoCE(t *testing.T) {
	var out bytes.Buffer
	if err := runIBStat(context.Background(), []string{"--bind", "127.0.0.1"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CA 'softrdma0'\n", "\t\tState: Active\n", "\t\tBase lid: 0\n", "\t\tLink layer: Ethernet\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{{"--bind", "127.0.0.1", "softrdma0", "2"}, {"a", "1", "extra"}, {"--bind", "nonsense"}} {
		if err := runIBStat(context.Background(), args, &out); err == nil {
			t.Errorf("ibstat %q succeeded", args)
		}
	}
}
