// Help, usage errors, version and exit statuses, the same for every
// subcommand.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
)

// errOut receives usage printed for errors: os.Stderr, or what run was
// given.
var errOut io.Writer = os.Stderr

// usageFunc returns a Usage for fs in the format every subcommand shares:
// the synopsis lines, a description, then the flags.
func usageFunc(fs *flag.FlagSet, synopsis, desc string) func() {
	return func() {
		w := fs.Output()
		for i, l := range strings.Split(synopsis, "\n") {
			if i == 0 {
				fmt.Fprintf(w, "usage: softrdma %s\n", l)
			} else {
				fmt.Fprintf(w, "       softrdma %s\n", l)
			}
		}
		if desc != "" {
			fmt.Fprintf(w, "\n%s\n", desc)
		}
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(w, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
}

// parseFlags parses args, whose flags and operands may interleave, and
// returns the operands. Asked for help (-h, -help, --help), it prints the
// usage to out and returns flag.ErrHelp, on which the command exits 0. A
// bad flag prints the usage to stderr and returns an error wrapping
// tool.ErrUsage (exit status 2).
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	pos, err := parseInterspersed(fs, args)
	fs.SetOutput(errOut)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(out)
		fs.Usage()
		fs.SetOutput(errOut)
		return nil, flag.ErrHelp
	case err != nil:
		fs.Usage()
		return nil, fmt.Errorf("%w: %v", tool.ErrUsage, err)
	}
	return pos, nil
}

// noOperands fails with a usage error if a command that takes none got
// some.
func noOperands(fs *flag.FlagSet, pos []string) error {
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("%w: unexpected argument %q", tool.ErrUsage, pos[0])
	}
	return nil
}

// isHelp reports whether a word asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// exitStatus is the status an error exits with: 0 after help, 2 for a
// usage error, 1 for anything else.
func exitStatus(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, tool.ErrUsage), errors.Is(err, perftest.ErrUsage):
		return 2
	}
	return 1
}

// version describes the build: the module version (a tag, a
// pseudo-version, or "(devel)" for a build from a checkout), the VCS
// revision when the build recorded it, and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "softrdma (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	out := "softrdma " + v
	if rev != "" {
		out += fmt.Sprintf(" (revision %.12s%s)", rev, modified)
	}
	return out + " " + bi.GoVersion
}

func runVersion(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = usageFunc(fs, "version", "Prints the module version of this build, its VCS revision if recorded, and the Go version.")
	pos, err := parseFlags(fs, args, out)
	if err != nil {
		return err
	}
	if err := noOperands(fs, pos); err != nil {
		return err
	}
	fmt.Fprintln(out, version())
	return nil
}
