// A progress line for long perf runs: on a terminal only, on stderr, and
// cleared before each line of the report so the report stays as perftest
// prints it.

package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress keeps a one-line status on a terminal.
type progress struct {
	w     io.Writer
	name  string
	start time.Time
	total time.Duration // the -D duration, or 0

	mu     sync.Mutex
	status string // the size running, with -a
	shown  bool
	stop   chan struct{}
	done   chan struct{}
}

// isTerminal reports whether f looks like a terminal: a character device
// (so also /dev/null, where a progress line does no harm).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startProgress shows name's progress on w every interval until stop.
func startProgress(w io.Writer, name string, total, interval time.Duration) *progress {
	p := &progress{w: w, name: name, start: time.Now(), total: total, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.show()
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

// size records the message size running (perftest.Config.Progress).
func (p *progress) size(i, n, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > 1 {
		p.status = fmt.Sprintf("size %d (%d of %d), ", size, i+1, n)
	}
}

func (p *progress) show() {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := time.Since(p.start).Truncate(time.Second)
	line := fmt.Sprintf("[%s: %s%v", p.name, p.status, el)
	if p.total > 0 {
		line += fmt.Sprintf(" of about %v", p.total)
	}
	fmt.Fprintf(p.w, "\r\033[K%s]", line)
	p.shown = true
}

func (p *progress) clearLocked() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// end stops the line and clears it.
func (p *progress) end() {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	p.clearLocked()
	p.mu.Unlock()
}

// around returns a writer for the report that clears the line before
// each write; the next tick shows it again.
func (p *progress) around(w io.Writer) io.Writer { return clearingWriter{p, w} }

type clearingWriter struct {
	p *progress
	w io.Writer
}

func (c clearingWriter) Write(b []byte) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	c.p.clearLocked()
	return c.w.Write(b)
}
