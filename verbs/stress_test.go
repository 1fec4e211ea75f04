package verbs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/link/loop"
)

// stressProfiles are the fault profiles the stress harness knows.
var stressProfiles = map[string]loop.Faults{
	"clean":  {},
	"loss":   {Loss: 0.1, Duplicate: 0.05, Reorder: 0.05},
	"loss20": {Loss: 0.2, Duplicate: 0.05, Reorder: 0.05},
	// loss20j is 20% loss with jitter: the profile that found the READ
	// retry stall at about one run in a thousand.
	"loss20j": {Loss: 0.2, Duplicate: 0.05, Reorder: 0.05, Delay: 20 * time.Microsecond, Jitter: 30 * time.Microsecond},
	"corrupt": {Corrupt: 0.05},
	"jitter":  {Delay: 20 * time.Microsecond, Jitter: 30 * time.Microsecond},
}

// TestStressRCPipeline is the stress harness for the RC engine. It is not
// part of the normal suite: it runs only when SOFTRDMA_STRESS names fault
// profiles (comma-separated, see stressProfiles), over the seeds of
// SOFTRDMA_STRESS_SEEDS ("1-240" or "5,63,90"; default 1-100), running
// runPipeline (TestRCLossyPipeline's workload) once per profile and seed.
// Each failing seed is a subtest failure naming profile and seed; at the end
// it logs, per profile, the packets the network carried against a clean run
// of the same workload (the go-back-N amplification).
//
// SOFTRDMA_STRESS_CLOCK picks the clock. "fake" (the default) runs each seed
// in a synctest bubble, as TestRCLossyPipeline does: the network's delays
// and every timer run on the bubble's clock, which moves only when every
// goroutine waits, so a run measures the protocol alone (a loaded machine
// cannot fire an ACK timeout before the acknowledgement is read) and takes
// a fraction of the wall time. "real" runs on the wall clock, where the
// scheduler's delays take part too. Example:
//
//	SOFTRDMA_STRESS=loss20j,jitter SOFTRDMA_STRESS_SEEDS=1-300 \
//		go test -run TestStressRCPipeline -v -timeout 2h ./verbs | grep -E 'FAIL|amplif'
func TestStressRCPipeline(t *testing.T) {
	spec := os.Getenv("SOFTRDMA_STRESS")
	if spec == "" {
		t.Skip("stress harness: set SOFTRDMA_STRESS (and SOFTRDMA_STRESS_SEEDS) to run it")
	}
	seeds, err := parseSeeds(os.Getenv("SOFTRDMA_STRESS_SEEDS"))
	if err != nil {
		t.Fatal(err)
	}
	// SOFTRDMA_STRESS_PROGRESS names a file that gets a line per finished
	// run as it finishes (parallel subtests report only at the end), so a
	// long run stopped early still says how many seeds ran.
	var progress *os.File
	if f := os.Getenv("SOFTRDMA_STRESS_PROGRESS"); f != "" {
		if progress, err = os.Create(f); err != nil {
			t.Fatal(err)
		}
		defer progress.Close()
	}
	run := runPipeline
	switch clock := os.Getenv("SOFTRDMA_STRESS_CLOCK"); clock {
	case "", "fake":
		run = func(t *testing.T, faults loop.Faults, seed uint64) (s loop.FaultStats) {
			synctest.Test(t, func(t *testing.T) { s = runPipeline(t, faults, seed) })
			return s
		}
	case "real":
	default:
		t.Fatalf("SOFTRDMA_STRESS_CLOCK=%q: want fake or real", clock)
	}
	clean := run(t, loop.Faults{}, 1).Sent
	for _, name := range strings.Split(spec, ",") {
		faults, ok := stressProfiles[name]
		if !ok {
			t.Fatalf("unknown profile %q", name)
		}
		var mu sync.Mutex
		var sent, maxSent uint64
		var runs, failed int
		t.Run(name, func(t *testing.T) {
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					t.Parallel()
					var s loop.FaultStats
					defer func() {
						mu.Lock()
						defer mu.Unlock()
						runs++
						if progress != nil {
							fmt.Fprintf(progress, "%s seed=%d failed=%v sent=%d runs=%d at %s\n",
								name, seed, t.Failed(), s.Sent, runs, time.Now().UTC().Format(time.TimeOnly))
						}
						if t.Failed() {
							failed++
							return
						}
						sent += s.Sent
						maxSent = max(maxSent, s.Sent)
					}()
					s = run(t, faults, seed)
				})
			}
		})
		good := runs - failed
		if good > 0 {
			t.Logf("%s: %d runs, %d failed; amplification: mean %.1fx, max %.1fx the %d packets of a clean run",
				name, runs, failed, float64(sent)/float64(good)/float64(clean), float64(maxSent)/float64(clean), clean)
		} else {
			t.Logf("%s: %d runs, %d failed", name, runs, failed)
		}
	}
}

// stressRetry is the retry_cnt of runPipeline's QPs (0: the default, 7).
// SOFTRDMA_STRESS_RETRY sets it, to measure how the rate of RETRY_EXC_ERR
// falls with the retries allowed (docs/DESIGN.md, "Liveness under loss").
var stressRetry = func() uint8 {
	n, _ := strconv.ParseUint(os.Getenv("SOFTRDMA_STRESS_RETRY"), 10, 3)
	return uint8(n)
}()

func parseSeeds(s string) ([]uint64, error) {
	if s == "" {
		s = "1-100"
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		lo, hi, rng := strings.Cut(f, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %w", f, err)
		}
		b := a
		if rng {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("seed range %q", f)
			}
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	return out, nil
}
