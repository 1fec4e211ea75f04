//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/interop/peer/internal/proto"
)

// Files the image builder and the agent agree on.
const (
	modulesList = "/etc/srdma/modules" // module files, one a line, in load order
	statusFile  = "/run/srdma-peer.json"
	gidDir      = "/sys/class/infiniband/rxe0/ports/1/gids"
	ipTool      = "/usr/sbin/ip" // iproute2, not busybox's applet
	rdmaTool    = "/usr/sbin/rdma"
)

// bootLog collects what setup did, for the status report and the console.
type bootLog struct {
	lines []string
	con   *os.File
}

func (l *bootLog) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	l.lines = append(l.lines, s)
	if l.con != nil {
		fmt.Fprintln(l.con, "srdma-peer:", s)
	}
}

func setup() error {
	log := &bootLog{}
	mounts := []struct{ src, dst, typ string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"devpts", "/dev/pts", "devpts"},
		{"tmpfs", "/dev/shm", "tmpfs"},
		{"tmpfs", "/tmp", "tmpfs"},
		{"tmpfs", "/run", "tmpfs"},
	}
	for _, m := range mounts {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			log.printf("mount %s: %v", m.dst, err)
		}
	}
	if con, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		log.con = con
		defer con.Close()
	}
	ready := false
	err := configure(log)
	if err != nil {
		log.printf("failed: %v", err)
	} else {
		ready = true
	}
	st := proto.Status{Ready: ready, Log: strings.Join(log.lines, "\n"), GIDs: readGIDs()}
	b, _ := json.Marshal(st)
	if werr := os.WriteFile(statusFile, b, 0o644); werr != nil {
		log.printf("write status: %v", werr)
	}
	if ready {
		log.printf("ready (uptime %s s)", uptime())
	}
	return err
}

// configure loads the modules, sets up eth0 and creates rxe0.
func configure(log *bootLog) error {
	params := cmdline()
	if err := loadModules(log); err != nil {
		return err
	}
	if err := waitFor(10*time.Second, func() bool { _, err := os.Stat("/sys/class/net/eth0"); return err == nil }); err != nil {
		return errors.New("no eth0 after loading virtio_net")
	}
	// The link only ever carries host<->guest traffic: no router solicitations.
	for _, dev := range []string{"all", "default", "eth0"} {
		for _, k := range []string{"router_solicitations", "accept_ra"} {
			_ = os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", dev, k), []byte("0"), 0o644)
		}
	}
	mtu := params["srdma.mtu"]
	if mtu == "" {
		mtu = "1500"
	}
	// Addresses before the link comes up: rxe then lists the GIDs as
	// 0 link-local, 1 IPv4-mapped, 2 IPv6, the order the host side relies on.
	steps := [][]string{
		{ipTool, "link", "set", "lo", "up"},
		{ipTool, "link", "set", "eth0", "mtu", mtu},
	}
	if a := params["srdma.ip4"]; a != "" {
		steps = append(steps, []string{ipTool, "addr", "add", a, "dev", "eth0"})
	}
	if a := params["srdma.ip6"]; a != "" {
		steps = append(steps, []string{ipTool, "-6", "addr", "add", a, "dev", "eth0", "nodad"})
	}
	steps = append(steps,
		[]string{ipTool, "link", "set", "eth0", "up"},
		[]string{rdmaTool, "link", "add", "rxe0", "type", "rxe", "netdev", "eth0"})
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	var want []string
	if a := params["srdma.ip4"]; a != "" {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("srdma.ip4: %v", err)
		}
		want = append(want, gidString(netip.AddrFrom16(p.Addr().As16())))
	}
	if a := params["srdma.ip6"]; a != "" {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("srdma.ip6: %v", err)
		}
		want = append(want, gidString(p.Addr()))
	}
	err := waitFor(10*time.Second, func() bool {
		g := readGIDs()
		for i, w := range want {
			if len(g) <= i+1 || g[i+1] != w {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("rxe0 GID table %q, want %q at indexes 1.. ", readGIDs(), want)
	}
	log.printf("rxe0 on eth0 (mtu %s), GIDs %s", mtu, strings.Join(readGIDs(), " "))
	return nil
}

// loadModules loads the modules the image builder listed, in order.
func loadModules(log *bootLog) error {
	b, err := os.ReadFile(modulesList)
	if err != nil {
		return err
	}
	for _, m := range strings.Fields(string(b)) {
		f, err := os.Open(m)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load %s: %w", filepath.Base(m), err)
		}
	}
	log.printf("loaded %d modules", len(strings.Fields(string(b))))
	return nil
}

// cmdline returns the key=value words of the kernel command line.
func cmdline() map[string]string {
	m := map[string]string{}
	b, _ := os.ReadFile("/proc/cmdline")
	for _, w := range strings.Fields(string(b)) {
		if k, v, ok := strings.Cut(w, "="); ok {
			m[k] = v
		}
	}
	return m
}

// readGIDs returns rxe0 port 1's GID table up to its last non-zero entry,
// in sysfs's notation.
func readGIDs() []string {
	var g []string
	last := -1
	for i := 0; ; i++ {
		b, err := os.ReadFile(filepath.Join(gidDir, fmt.Sprint(i)))
		if err != nil {
			break
		}
		s := strings.TrimSpace(string(b))
		g = append(g, s)
		if s != "0000:0000:0000:0000:0000:0000:0000:0000" {
			last = i
		}
	}
	return g[:last+1]
}

// gidString writes a as sysfs writes GIDs: eight groups of four hex digits.
func gidString(a netip.Addr) string {
	b := a.As16()
	var sb strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			sb.WriteByte(':')
		}
		fmt.Fprintf(&sb, "%02x%02x", b[i], b[i+1])
	}
	return sb.String()
}

func waitFor(d time.Duration, ok func() bool) error {
	end := time.Now().Add(d)
	for !ok() {
		if time.Now().After(end) {
			return errors.New("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func uptime() string {
	f, err := os.Open("/proc/uptime")
	if err != nil {
		return "?"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	if s.Scan() {
		if w := strings.Fields(s.Text()); len(w) > 0 {
			return w[0]
		}
	}
	return "?"
}
