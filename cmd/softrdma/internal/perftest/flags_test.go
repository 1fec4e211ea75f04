package perftest

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// TestConnTypes runs the tests perftest allows over UC and UD between two
// softrdma devices over UDP, and checks the header and the results: every
// message of the run arrived (the SEND servers count their receives).
func TestConnTypes(t *testing.T) {
	for _, tc := range []struct {
		test string
		conn ConnType
		size int
	}{
		{"write_bw", UC, 4096}, {"send_bw", UC, 4096}, {"write_lat", UC, 2}, {"send_lat", UC, 2},
		{"send_bw", UD, 1024}, {"send_lat", UD, 2},
		// Above the MTU, UD sends one MTU, as perftest.
		{"send_bw", UD, 4096},
	} {
		t.Run(tc.test+"/"+tc.conn.String()+"/"+strconv.Itoa(tc.size), func(t *testing.T) {
			srv, cli := devicePair(t, false)
			cfg := Config{Test: Tests[tc.test], Iters: 20, Inline: -1, GIDIndex: -1, Conn: tc.conn}
			cfg.SetSize(tc.size)
			sout, cout, serr, cerr := runPair(t, srv, cli, cfg)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			want := tc.size
			if tc.conn == UD {
				want = min(want, 1024)
			}
			for side, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, " Connection type : "+tc.conn.String()+"\t\t") {
					t.Errorf("%s: no %v connection type line:\n%s", side, tc.conn, out)
				}
				row := bwRow
				if !Tests[tc.test].BW {
					row = latRow
				}
				m := row.FindStringSubmatch(out)
				if m == nil || m[1] != strconv.Itoa(want) || m[2] != "20" {
					t.Errorf("%s: result row %q, want %d bytes, 20 iterations:\n%s", side, m, want, out)
				}
			}
		})
	}
}

// TestConnRefused: perftest's restrictions on -c.
func TestConnRefused(t *testing.T) {
	for _, tc := range []struct {
		s    string
		verb Verb
	}{{"UC", Read}, {"UC", Atomic}, {"UD", Write}, {"UD", Read}, {"UD", Atomic}, {"XRC", Send}, {"rc", Send}} {
		if _, err := ParseConn(tc.s, tc.verb); !errors.Is(err, ErrUsage) {
			t.Errorf("-c %s for %v: %v, want ErrUsage", tc.s, tc.verb, err)
		}
	}
	for _, c := range []Config{
		{Test: Tests["read_bw"], Conn: UC},
		{Test: Tests["write_bw"], Conn: UD},
		{Test: Tests["write_bw"], Conn: UC, RDMACM: true},
	} {
		if err := c.Normalize(); !errors.Is(err, ErrUsage) {
			t.Errorf("%v -c %v (rdma_cm %v): %v, want ErrUsage", c.Test, c.Conn, c.RDMACM, err)
		}
	}
	// UC and UD SEND tests have a receive for every message.
	c := Config{Test: Tests["send_bw"], Conn: UD, Iters: 1000}
	if err := c.Normalize(); err != nil || c.RxDepth != 1000 || c.Inline != 0 {
		t.Errorf("send_bw -c UD: %v, rx depth %d, inline %d", err, c.RxDepth, c.Inline)
	}
	c = Config{Test: Tests["send_lat"], Conn: UD, Inline: -1}
	if err := c.Normalize(); err != nil || c.Inline != defInlineSendUD {
		t.Errorf("send_lat -c UD: %v, inline %d, want %d", err, c.Inline, defInlineSendUD)
	}
}

// TestPostList runs write_bw and send_bw with -l 4 and checks the header
// lines perftest prints, the CQ moderation, and the completed run; and
// perftest's refusals.
func TestPostList(t *testing.T) {
	for _, name := range []string{"write_bw", "send_bw"} {
		t.Run(name, func(t *testing.T) {
			srv, cli := devicePair(t, false)
			cfg := Config{Test: Tests[name], Iters: 40, PostList: 4, GIDIndex: -1}
			cfg.SetSize(4096)
			sout, cout, serr, cerr := runPair(t, srv, cli, cfg)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			for _, want := range []string{"Post List requested - CQ moderation will be the size of the post list\n",
				" Post List BW Test\n", " Post List       : 4\n", " CQ Moderation   : 4\n"} {
				if !strings.Contains(cout, want) {
					t.Errorf("client output lacks %q:\n%s", want, cout)
				}
			}
			for side, out := range map[string]string{"server": sout, "client": cout} {
				m := bwRow.FindStringSubmatch(out)
				if m == nil || m[1] != "4096" || m[2] != "40" {
					t.Errorf("%s: result row %q:\n%s", side, m, out)
				}
			}
		})
	}
	for _, c := range []Config{
		{Test: Tests["write_lat"], PostList: 2},
		{Test: Tests["write_bw"], PostList: 3, Iters: 100},
		{Test: Tests["write_bw"], PostList: 4, CQMod: 3, Iters: 100},
		{Test: Tests["write_bw"], PostList: 8, TxDepth: 4, Iters: 80},
	} {
		if err := c.Normalize(); !errors.Is(err, ErrUsage) {
			t.Errorf("%+v: %v, want ErrUsage", c, err)
		}
	}
	c := Config{Test: Tests["write_bw"], PostList: 4, CQMod: 2, Iters: 100}
	if err := c.Normalize(); err != nil || c.CQMod != 2 || c.postListCQ {
		t.Errorf("-l 4 -Q 2: %v, CQ moderation %d", err, c.CQMod)
	}
}

// TestOutput: --output prints only the number, on each side that prints a
// result, and nothing else.
func TestOutput(t *testing.T) {
	num := regexp.MustCompile(`^\d+\.\d{6}\n$`)
	for _, tc := range []struct {
		test string
		out  Output
	}{{"write_bw", OutputBandwidth}, {"send_bw", OutputMsgRate}, {"send_lat", OutputLatency}, {"read_lat", OutputLatency}} {
		t.Run(tc.test, func(t *testing.T) {
			srv, cli := devicePair(t, false)
			cfg := Config{Test: Tests[tc.test], Iters: 20, GIDIndex: -1, Output: tc.out, Inline: -1}
			sout, cout, serr, cerr := runPair(t, srv, cli, cfg)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			if !num.MatchString(cout) {
				t.Errorf("client printed %q, want one number", cout)
			}
			if v, _ := strconv.ParseFloat(strings.TrimSpace(cout), 64); v <= 0 {
				t.Errorf("client's number %q is not positive", cout)
			}
			if tc.test == "read_lat" {
				if sout != "" {
					t.Errorf("read_lat server printed %q, want nothing", sout)
				}
			} else if !num.MatchString(sout) {
				t.Errorf("server printed %q, want one number", sout)
			}
		})
	}
	for _, c := range []Config{
		{Test: Tests["write_bw"], Output: OutputLatency},
		{Test: Tests["write_lat"], Output: OutputBandwidth},
		{Test: Tests["send_lat"], Output: OutputMsgRate},
	} {
		if err := c.Normalize(); !errors.Is(err, ErrUsage) {
			t.Errorf("%v --output %d: %v, want ErrUsage", c.Test, c.Output, err)
		}
	}
	if _, err := ParseOutput("bw"); !errors.Is(err, ErrUsage) {
		t.Errorf("--output=bw: %v", err)
	}
}

// TestDuplex runs write_bw, read_bw and atomic_bw with -b: both sides post
// (so both run a loop and complete their own work) and print the sum of
// both results, the same numbers on each side.
func TestDuplex(t *testing.T) {
	for _, name := range []string{"write_bw", "read_bw", "atomic_bw"} {
		t.Run(name, func(t *testing.T) {
			srv, cli := devicePair(t, false)
			cfg := Config{Test: Tests[name], Iters: 50, GIDIndex: -1, Duplex: true}
			if name != "atomic_bw" {
				cfg.SetSize(4096)
			}
			before := srv.Counters()
			sout, cout, serr, cerr := runPair(t, srv, cli, cfg)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			var rows [2][]string
			for i, out := range []string{sout, cout} {
				if !strings.Contains(out, " Bidirectional BW Test\n") || !strings.Contains(out, " TX depth        : ") {
					t.Errorf("no bidirectional header or TX depth:\n%s", out)
				}
				rows[i] = bwRow.FindStringSubmatch(out)
				if rows[i] == nil || rows[i][2] != "50" {
					t.Fatalf("result row %q:\n%s", rows[i], out)
				}
			}
			if rows[0][4] != rows[1][4] || rows[0][5] != rows[1][5] {
				t.Errorf("server's sum %v, client's %v: want the same", rows[0][3:], rows[1][3:])
			}
			// The server posted its own 50 requests as well as answering
			// the client's: at least 4 packets per 4 KiB WRITE plus an ACK
			// (coalesced: at least one), 1 READ request plus 4 responses, or an
			// atomic and an atomic ACK per message (without -b it sends
			// only the answers: at most 200, 200 or 50).
			want := map[string]uint64{"write_bw": 201, "read_bw": 250, "atomic_bw": 100}[name]
			if sent := counter(srv.Counters(), "sent_pkts") - counter(before, "sent_pkts"); sent < want {
				t.Errorf("server sent %d packets, want at least %d", sent, want)
			}
		})
	}
	for _, c := range []Config{
		{Test: Tests["write_lat"], Duplex: true},
		{Test: Tests["send_bw"], Duplex: true},
		{Test: Tests["write_bw"], Duplex: true, All: true},
	} {
		if err := c.Normalize(); !errors.Is(err, ErrUsage) {
			t.Errorf("%v -b: %v, want ErrUsage", c.Test, err)
		}
	}
}

func counter(cs []verbs.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
