package main

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestHello runs the program and checks that README shows it as it is.
func TestHello(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Error("README.md does not show examples/hello/main.go as it is")
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mod)) {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			if want := "Go " + strings.TrimSpace(v) + " or later"; !strings.Contains(string(readme), want) {
				t.Errorf("README.md does not say %q, as go.mod asks", want)
			}
		}
	}
	if c, err := net.ListenPacket("udp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 cannot be bound here (%v); the demo's fallback is not this program's point", err)
	} else {
		c.Close()
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "server got \"hello, RDMA\" (immediate 42)\n" {
		t.Fatalf("printed %q", got)
	}
}
