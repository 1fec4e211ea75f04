package main

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lockedBuilder is a strings.Builder safe for the ticker's goroutine.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProgress checks the progress line: shown each tick with the size
// and the time, cleared before each line of the report and at the end.
func TestProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var term, report lockedBuilder
		p := startProgress(&term, "perf write_bw", 30*time.Second, time.Second)
		p.size(2, 23, 8)
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		if got := term.String(); !strings.HasSuffix(got, "\r\033[K[perf write_bw: size 8 (3 of 23), 2s of about 30s]") {
			t.Fatalf("progress line %q", got)
		}
		w := p.around(&report)
		w.Write([]byte("       8          5000           0.50               0.50               0.065536\n"))
		if got := term.String(); !strings.HasSuffix(got, "]\r\033[K") {
			t.Errorf("the line was not cleared before the report: %q", got)
		}
		if !strings.HasPrefix(report.String(), "       8 ") {
			t.Errorf("report %q", report.String())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		p.end()
		if got := term.String(); !strings.HasSuffix(got, "3s of about 30s]\r\033[K") {
			t.Errorf("the line was not cleared at the end: %q", got)
		}
	})
}
