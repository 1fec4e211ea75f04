package perftestrace

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// logTB keeps what is logged to it.
type logTB struct {
	testing.TB
	logs []string
}

func (l *logTB) Logf(format string, args ...any) {
	l.logs = append(l.logs, fmt.Sprintf(format, args...))
}

// lostOutput holds, among other lines, the event and reason that a
// perftest client losing the race prints.
const lostOutput = " some line\nRDMA_CM_EVENT_REJECTED; error: 8\n Failed to connect QPs\n"

func TestLost(t *testing.T) {
	for _, c := range []struct {
		out  string
		want bool
	}{
		{lostOutput, true},
		{"", false},
		{"Unexpected CM event RDMA_CM_EVENT_REJECTED; error: 28\n", false}, // another reason
		{"Unexpected CM event RDMA_CM_EVENT_UNREACHABLE; error: -110\n", false},
	} {
		if got := Lost(c.out); got != c.want {
			t.Errorf("Lost(%q) = %v, want %v", c.out, got, c.want)
		}
	}
}

func TestRerun(t *testing.T) {
	errFailed := errors.New("client: exit status 1")
	errOther := errors.New("server: exit status 1")
	for _, c := range []struct {
		name string
		runs int
		// outcomes are the pair's runs in order; the pair fails the
		// test if called beyond them.
		outcomes []error
		lost     []bool
		want     error
		calls    int
		logged   int
	}{
		{"first run passes", 6, []error{nil}, []bool{false}, nil, 1, 0},
		{"lost twice then passes", 6, []error{errFailed, errFailed, nil}, []bool{true, true, false}, nil, 3, 2},
		{"lost every run", 3, []error{errFailed, errFailed, errFailed}, []bool{true, true, true}, errFailed, 3, 2},
		{"another failure ends at once", 6, []error{errFailed, errOther}, []bool{true, false}, errOther, 2, 1},
		{"lost output but no failure", 6, []error{nil}, []bool{true}, nil, 1, 0},
		{"one run only", 1, []error{errFailed}, []bool{true}, errFailed, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			tb := &logTB{TB: t}
			err := Rerun(tb, c.runs, func() (string, error) {
				if calls >= len(c.outcomes) {
					t.Fatalf("pair run %d times, want %d", calls+1, c.calls)
				}
				out := "ok\n"
				if c.lost[calls] {
					out = lostOutput
				}
				err := c.outcomes[calls]
				calls++
				return out, err
			})
			if err != c.want {
				t.Errorf("Rerun = %v, want %v", err, c.want)
			}
			logged := len(tb.logs)
			for i, l := range tb.logs {
				if want := fmt.Sprintf("run %d: ", i+1); !strings.HasPrefix(l, want) {
					t.Errorf("log %q does not begin %q", l, want)
				}
			}
			if calls != c.calls || logged != c.logged {
				t.Errorf("pair run %d times, %d logged; want %d and %d", calls, logged, c.calls, c.logged)
			}
		})
	}
}
