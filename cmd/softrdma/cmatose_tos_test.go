package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// eachRoCE calls f with every RoCE packet of a pcap file (link type RAW,
// as --pcap writes) and the IP header it came in.
func eachRoCE(t *testing.T, path string, f func(ip []byte, pkt wire.Packet)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, err := pcapgo.NewReader(file)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ip, _, err := r.ReadPacketData()
		if err != nil {
			return
		}
		_, roce, err := wire.SplitIP(ip)
		if err != nil {
			continue
		}
		if pkt, err := wire.Parse(roce); err == nil {
			f(ip, pkt)
		}
	}
}

// tclassesIn counts the packets a --pcap file holds by IP traffic class,
// leaving out MADs (QP1).
func tclassesIn(t *testing.T, path string) map[uint8]int {
	t.Helper()
	out := map[uint8]int{}
	eachRoCE(t, path, func(ip []byte, pkt wire.Packet) {
		if pkt.BTH().DestQP() == mad.GSIQPN {
			return
		}
		tc := ip[1]
		if ip[0]>>4 == 6 {
			tc = ip[0]<<4 | ip[1]>>4
		}
		out[tc]++
	})
	return out
}

// TestCmatoseTOS runs cmatose with -t over loopback: the client's packets
// leave with its type of service and the server's with the one the REQ
// carried (each side's --pcap records what it sent). A -t that is not a
// byte is a usage error.
func TestCmatoseTOS(t *testing.T) {
	port := freeUDPPort(t)
	dir := t.TempDir()
	spcap, cpcap := dir+"/server.pcap", dir+"/client.pcap"
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runCmatose(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-b", "127.0.0.2", "-p", "7476", "-c", "2", "-C", "5", "-roce-port", port, "--pcap", spcap},
		[]string{"-s", "127.0.0.2", "-b", "127.0.0.1", "-p", "7476", "-c", "2", "-C", "5", "-t", "0xba", "-roce-port", port, "--pcap", cpcap})
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Fatalf("output:\n%s", out)
		}
	}
	// Each file holds both directions, but a packet received over UDP is
	// recorded with class 0 (a socket does not see it): the packets with
	// 0xba are the ones that side sent.
	for _, f := range []string{spcap, cpcap} {
		got := tclassesIn(t, f)
		if got[0xba] < 2*5 {
			t.Errorf("%s: packets by traffic class %v, want at least %d with 0xba", f, got, 2*5)
		}
	}
	for _, bad := range []string{"256", "-1", "x"} {
		var out bytes.Buffer
		if err := runCmatose(context.Background(), []string{"-s", "127.0.0.2", "-t", bad}, &out); err == nil || !strings.Contains(err.Error(), "type of service") {
			t.Errorf("-t %s: %v", bad, err)
		}
	}
}

// reqACKTimeouts returns the primary path local ACK timeouts of the CM
// REQs in a --pcap file.
func reqACKTimeouts(t *testing.T, path string) []uint8 {
	t.Helper()
	var out []uint8
	eachRoCE(t, path, func(_ []byte, pkt wire.Packet) {
		if pkt.BTH().DestQP() != mad.GSIQPN {
			return
		}
		m, err := mad.Parse(pkt.Payload())
		if err == nil && m.MgmtClass() == mad.ClassCM && m.AttributeID() == mad.AttrREQ {
			out = append(out, mad.REQ(m.Data()).PrimaryPath().LocalACKTimeout())
		}
	})
	return out
}

// TestCmatoseACKTimeout runs cmatose with -a on both sides: the client's
// REQs announce its value, and both sides complete; a value out of 0..31
// is a usage error.
func TestCmatoseACKTimeout(t *testing.T) {
	port := freeUDPPort(t)
	cpcap := t.TempDir() + "/client.pcap"
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runCmatose(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-b", "127.0.0.2", "-p", "7477", "-c", "2", "-C", "5", "-a", "20", "-roce-port", port},
		[]string{"-s", "127.0.0.2", "-b", "127.0.0.1", "-p", "7477", "-c", "2", "-C", "5", "-a", "9", "-roce-port", port, "--pcap", cpcap})
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") || strings.Contains(out, "failed") {
			t.Fatalf("output:\n%s", out)
		}
	}
	if got := reqACKTimeouts(t, cpcap); len(got) != 2 || got[0] != 9 || got[1] != 9 {
		t.Errorf("REQ local ACK timeouts %v, want [9 9]", got)
	}
	for _, bad := range []string{"32", "-1", "x"} {
		var out bytes.Buffer
		if err := runCmatose(context.Background(), []string{"-s", "127.0.0.2", "-a", bad}, &out); err == nil || !strings.Contains(err.Error(), "ACK timeout") {
			t.Errorf("-a %s: %v", bad, err)
		}
	}
}

// TestCmatoseMigrate runs cmatose -m on both sides: after the data
// transfers each moves its IDs (the server its listener too) to a new event
// channel and finishes there: the disconnect events, some of which arrive
// before the move, reach the new channel and both sides end cleanly.
func TestCmatoseMigrate(t *testing.T) {
	port := freeUDPPort(t)
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runCmatose(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-b", "127.0.0.2", "-p", "7478", "-c", "3", "-C", "5", "-m", "-roce-port", port},
		[]string{"-s", "127.0.0.2", "-b", "127.0.0.1", "-p", "7478", "-c", "3", "-C", "5", "-m", "-roce-port", port})
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "migrating to new event channel\n") || !strings.Contains(out, "return status 0") || strings.Contains(out, "failure") {
			t.Fatalf("output:\n%s", out)
		}
	}
	if i, j := strings.Index(s, "migrating"), strings.Index(s, "disconnected"); i < 0 || j < i {
		t.Errorf("server output: the migration does not come before the disconnect:\n%s", s)
	}
}
