package pingpong

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/verbs"
)

var (
	tsMaxRE = regexp.MustCompile(`^Max receive completion clock cycles = (\d+)$`)
	tsMinRE = regexp.MustCompile(`^Min receive completion clock cycles = (\d+)$`)
	tsAvgRE = regexp.MustCompile(`^Average receive completion clock cycles = (\d+\.\d{6})$`)
)

// TestPingpongTimestamps runs ibv_rc_pingpong -t on both sides (the flag is
// local: the C server may run without it) and checks the receive
// completion intervals: one per receive after the first, consistent with
// each other, inside the run, and printed as the C tool prints them.
func TestPingpongTimestamps(t *testing.T) {
	srv, cli := openPair(t, "127.0.0.1", "127.0.0.2")
	scfg := baseConfig(RC)
	scfg.Timestamps = true
	ccfg := baseConfig(RC)
	ccfg.Timestamps = true
	t0 := verbs.DeviceClock()
	s, c := pingpong(t, srv, cli, scfg, ccfg)
	span := verbs.DeviceClock() - t0
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v\nclient: %v\n%s\n%s", s.err, c.err, s.out, c.out)
	}
	for _, o := range []outcome{s, c} {
		ts := o.res.RecvTS
		if ts.N != scfg.Iters-1 {
			t.Errorf("%d intervals, want %d", ts.N, scfg.Iters-1)
		}
		avg := float64(ts.Total) / float64(ts.N)
		if ts.Min == 0 || float64(ts.Min) > avg || avg > float64(ts.Max) {
			t.Errorf("min %d, avg %f, max %d", ts.Min, avg, ts.Max)
		}
		// Device clock cycles are nanoseconds of DeviceClock: the
		// intervals between receives fit in the run, and a ping-pong
		// round trip takes at least a microsecond.
		if ts.Total > span || ts.Min < 1000 {
			t.Errorf("intervals total %d ns (min %d), the runs took %d", ts.Total, ts.Min, span)
		}
		lines := strings.Split(strings.TrimSuffix(o.out, "\n"), "\n")
		if len(lines) != 7 {
			t.Fatalf("%d lines, want 7:\n%s", len(lines), o.out)
		}
		checkOutput(t, strings.Join(lines[:4], "\n")+"\n", 1, scfg)
		for i, want := range []struct {
			re *regexp.Regexp
			v  string
		}{{tsMaxRE, strconv.FormatUint(ts.Max, 10)}, {tsMinRE, strconv.FormatUint(ts.Min, 10)}, {tsAvgRE, strconv.FormatFloat(avg, 'f', 6, 64)}} {
			if m := want.re.FindStringSubmatch(lines[4+i]); m == nil || m[1] != want.v {
				t.Errorf("line %q, want the value %s", lines[4+i], want.v)
			}
		}
	}
}

// TestPingpongTimestampsOneSide: -t changes nothing on the wire, so one
// side may use it alone; the other prints no timestamp lines.
func TestPingpongTimestampsOneSide(t *testing.T) {
	srv, cli := openPair(t, "127.0.0.1", "127.0.0.2")
	scfg := baseConfig(RC)
	ccfg := baseConfig(RC)
	ccfg.Timestamps = true
	s, c := pingpong(t, srv, cli, scfg, ccfg)
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v\nclient: %v", s.err, c.err)
	}
	checkOutput(t, s.out, 1, scfg)
	if s.res.RecvTS.N != 0 || c.res.RecvTS.N != ccfg.Iters-1 {
		t.Errorf("intervals: server %d, client %d", s.res.RecvTS.N, c.res.RecvTS.N)
	}
}

func TestTimestampsRCOnly(t *testing.T) {
	for _, typ := range []Type{UC, UD, SRQ} {
		cfg := baseConfig(typ)
		cfg.Timestamps = true
		if err := cfg.check(); !errors.Is(err, tool.ErrUsage) {
			t.Errorf("%v -t: %v, want ErrUsage", typ, err)
		}
	}
}

// TestTSStatsWrap checks the interval across a wrap of the clock, as the C
// tool computes it.
func TestTSStatsWrap(t *testing.T) {
	var s TSStats
	const mask = 0xffff
	for _, ts := range []uint64{0xfff0, 0xfffa, 0x0004, 0x0010} {
		s.add(ts, mask)
	}
	if s.N != 3 || s.Min != 10 || s.Max != 12 || s.Total != 32 {
		t.Errorf("%+v, want 3 intervals of 10, 10 and 12", s)
	}
}
