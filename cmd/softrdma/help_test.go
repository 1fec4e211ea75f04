package main

import (
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestHelp checks that every way of asking for help exits 0 and prints,
// on stdout, the usage line and every flag of the command.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var out, errb strings.Builder
		if st := run(args, &out, &errb); st != 0 || errb.Len() > 0 {
			t.Errorf("softrdma %s: status %d, stderr %q", args[0], st, errb.String())
		}
		for name := range commands {
			if !strings.Contains(out.String(), "\n  "+name+" ") {
				t.Errorf("softrdma %s does not list %s:\n%s", args[0], name, out.String())
			}
		}
	}
	cases := map[string][]string{}
	for name := range commands {
		cases[name+" -h"] = []string{name, "-h"}
		cases[name+" --help"] = []string{name, "--help"}
		cases["help "+name] = []string{"help", name}
	}
	cases["perf write_bw -h"] = []string{"perf", "write_bw", "-h"}
	cases["perf help"] = []string{"perf", "help"}
	for label, args := range cases {
		var out, errb strings.Builder
		st := run(args, &out, &errb)
		text := out.String()
		if st != 0 || errb.Len() > 0 {
			t.Errorf("softrdma %s: status %d, stderr %q", label, st, errb.String())
			continue
		}
		flags := flagsOf(t, args)
		if !strings.HasPrefix(text, "usage: softrdma ") || (len(flags) > 0) != strings.Contains(text, "\nflags:\n") {
			t.Errorf("softrdma %s: not a usage:\n%s", label, text)
		}
		// Every flag the command defines is listed.
		for _, f := range flags {
			if !strings.Contains(text, "  -"+f+" ") && !strings.Contains(text, "  -"+f+"\n") && !strings.Contains(text, "  -"+f+"\t") {
				t.Errorf("softrdma %s does not show -%s", label, f)
			}
		}
	}
}

// flagsOf lists the flags of a command by parsing a flag no command has
// and reading the error path's usage.
func flagsOf(t *testing.T, args []string) []string {
	name := args[0]
	if name == "help" {
		name = args[1]
	}
	sub := []string{"-no-such-flag"}
	if name == "perf" {
		sub = []string{"write_bw", "-no-such-flag"}
	}
	var out, errb strings.Builder
	if st := run(append([]string{name}, sub...), &out, &errb); st != 2 {
		t.Errorf("softrdma %s -no-such-flag: status %d, want 2", name, st)
	}
	var flags []string
	for line := range strings.Lines(errb.String()) {
		if f, ok := strings.CutPrefix(line, "  -"); ok {
			flags = append(flags, strings.Fields(f)[0])
		}
	}
	if len(flags) == 0 && name != "version" {
		t.Errorf("softrdma %s: no flags in the usage printed on a bad flag:\n%s", name, errb.String())
	}
	return flags
}

// TestUsageErrors checks the statuses of mistakes: an unknown command, a
// bad flag and a stray argument exit 2 and say what was wrong.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: softrdma COMMAND"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"help", "bogus"}, `unknown command "bogus"`},
		{[]string{"demo", "-x"}, "flag provided but not defined: -x"},
		{[]string{"devinfo", "extra"}, `unexpected argument "extra"`},
		{[]string{"perf"}, "name a test"},
		{[]string{"perf", "write_bandwidth"}, `unknown test "write_bandwidth"`},
		{[]string{"dump"}, "need one capture file"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
	} {
		var out, errb strings.Builder
		if st := run(c.args, &out, &errb); st != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("softrdma %q: status %d, stderr %q; want 2 and %q", c.args, st, errb.String(), c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	var out, errb strings.Builder
	if st := run([]string{"version"}, &out, &errb); st != 0 || !strings.HasPrefix(out.String(), "softrdma ") ||
		!strings.Contains(out.String(), runtime.Version()) {
		t.Fatalf("version: status %d, %q %q", st, out.String(), errb.String())
	}
}

// TestInterrupt runs a server that waits forever, interrupts it as Ctrl-C
// does, and expects status 130 and no error message.
func TestInterrupt(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	if os.Getenv("SOFTRDMA_INTERRUPT_CHILD") == "1" {
		os.Exit(run([]string{"perf", "write_bw", "--bind", "127.0.0.1", "--roce-port", "24795", "-p", "24795"}, os.Stdout, os.Stderr))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterrupt$")
	cmd.Env = append(os.Environ(), "SOFTRDMA_INTERRUPT_CHILD=1")
	var errb strings.Builder
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The server says it waits for a client once its signal handler is
	// in place.
	var seen strings.Builder
	buf := make([]byte, 256)
	for !strings.Contains(seen.String(), "Waiting for client") {
		n, err := stdout.Read(buf)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("server output %q, stderr %q: %v", seen.String(), errb.String(), err)
		}
		seen.Write(buf[:n])
	}
	cmd.Process.Signal(syscall.SIGINT)
	io.Copy(io.Discard, stdout) // until the server exits
	err = cmd.Wait()
	if cmd.ProcessState.ExitCode() != 130 || errb.Len() > 0 {
		t.Fatalf("interrupted server: %v, stderr %q; want status 130 and nothing printed", err, errb.String())
	}
}
