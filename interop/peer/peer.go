//go:build linux

package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/interop/peer/internal/proto"
)

// The link's fixed addresses.
var (
	HostIPv4  = netip.MustParseAddr("198.18.0.1")
	GuestIPv4 = netip.MustParseAddr("198.18.0.2")
	HostIPv6  = netip.MustParseAddr("fd00:198:18::1")
	GuestIPv6 = netip.MustParseAddr("fd00:198:18::2")
)

// GuestMAC is the guest's fixed MAC address (its link-local GID follows).
const GuestMAC = "52:54:00:12:34:56"

// Config says how to boot a peer. Zero fields take the defaults shown.
type Config struct {
	// CacheDir holds the kernel and the initramfs (DefaultCacheDir()).
	CacheDir string
	// WorkDir receives the console log and QEMU's messages (a new temporary
	// directory, removed by Close unless KeepWorkDir).
	WorkDir     string
	KeepWorkDir bool
	// Namespace is the network namespace to create; it must not exist
	// ("srdma-peer-PID").
	Namespace string
	// Tap is the tap device's name inside the namespace ("srdmatap0").
	Tap string
	// MTU of the tap and of the guest's eth0 (1500: rxe's active MTU 1024).
	MTU int
	// Accel is "auto", "kvm" or "tcg" (SOFTRDMA_PEER_ACCEL, else "auto":
	// KVM when it boots, TCG otherwise).
	Accel string
	// MemMiB and CPUs size the guest (1024, 2).
	MemMiB, CPUs int
	// BootTimeout bounds the boot (300 s under TCG; 30 s before a KVM boot
	// is given up for TCG).
	BootTimeout time.Duration
	// Logf receives progress lines (none).
	Logf func(format string, args ...any)
}

// DefaultCacheDir is $SOFTRDMA_PEER_CACHE, else softrdma/peer under the
// user cache directory ($XDG_CACHE_HOME or ~/.cache), else under /tmp.
func DefaultCacheDir() string {
	if d := os.Getenv("SOFTRDMA_PEER_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "softrdma", "peer")
	}
	return filepath.Join(os.TempDir(), "softrdma-peer-cache")
}

// ErrNotRoot is returned by Boot when the process is not root or the host
// lacks /dev/net/tun.
var ErrNotRoot = errors.New("peer: needs root and /dev/net/tun")

// Peer is a running guest and its network namespace.
type Peer struct {
	cfg     Config
	img     *Image
	accel   string
	qemu    *exec.Cmd
	qemuErr chan error // QEMU's exit
	console string

	mu     sync.Mutex
	closed bool
}

// CheckHost reports whether this host can run a peer: root, /dev/net/tun,
// and the programs it needs.
func CheckHost() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: running as uid %d", ErrNotRoot, os.Geteuid())
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("%w: %v", ErrNotRoot, err)
	}
	var missing []string
	for _, p := range []string{"qemu-system-x86_64", "ip", "cpio", "xz", "ldd", "ldconfig", "depmod", "dpkg-deb", "apt-get", "busybox"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("peer: missing host programs: %s", strings.Join(missing, " "))
	}
	return nil
}

// Boot builds the image if needed, creates the namespace and tap, boots the
// guest and returns once rxe0 is ready and the agent answers. On error
// nothing is left behind.
func Boot(ctx context.Context, cfg Config) (_ *Peer, err error) {
	if err := CheckHost(); err != nil {
		return nil, err
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultCacheDir()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = fmt.Sprintf("srdma-peer-%d", os.Getpid())
	}
	if cfg.Tap == "" {
		cfg.Tap = "srdmatap0"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Accel == "" {
		cfg.Accel = os.Getenv("SOFTRDMA_PEER_ACCEL")
	}
	if cfg.Accel == "" {
		cfg.Accel = "auto"
	}
	if cfg.MemMiB == 0 {
		cfg.MemMiB = 1024
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 300 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	p := &Peer{cfg: cfg}
	if p.cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "srdma-peer-")
		if err != nil {
			return nil, err
		}
		p.cfg.WorkDir = d
	} else if err := os.MkdirAll(p.cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	p.console = filepath.Join(p.cfg.WorkDir, "console.log")
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	t0 := time.Now()
	p.img, err = BuildImage(ctx, cfg.CacheDir, cfg.Logf)
	if err != nil {
		return nil, err
	}
	cfg.Logf("peer: image ready in %v (kernel %s)", time.Since(t0).Round(time.Millisecond), p.img.KernelVersion)
	if err := p.setupNetns(ctx); err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := p.bootVM(ctx); err != nil {
		return nil, err
	}
	cfg.Logf("peer: guest ready in %v (accel %s, qemu pid %d, netns %s, console %s)",
		time.Since(t1).Round(time.Millisecond), p.accel, p.qemu.Process.Pid, cfg.Namespace, p.console)
	return p, nil
}

// Namespace is the network namespace holding the tap.
func (p *Peer) Namespace() string { return p.cfg.Namespace }

// Tap is the tap device's name inside the namespace.
func (p *Peer) Tap() string { return p.cfg.Tap }

// Accel is the accelerator the guest runs on ("kvm" or "tcg").
func (p *Peer) Accel() string { return p.accel }

// Console returns the guest's serial console output so far.
func (p *Peer) Console() string {
	b, _ := os.ReadFile(p.console)
	return string(b)
}

// WorkDir is where the console log and QEMU's messages go.
func (p *Peer) WorkDir() string { return p.cfg.WorkDir }

func (p *Peer) ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// setupNetns creates the namespace with lo and the tap carrying the host
// addresses; nothing routes anywhere else.
func (p *Peer) setupNetns(ctx context.Context) error {
	ns, tap := p.cfg.Namespace, p.cfg.Tap
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		return fmt.Errorf("peer: network namespace %s already exists", ns)
	}
	if err := p.ip(ctx, "netns", "add", ns); err != nil {
		return err
	}
	for _, k := range []string{"net.ipv6.conf.default.router_solicitations=0", "net.ipv6.conf.default.accept_ra=0"} {
		if out, err := p.Command(ctx, "sysctl", "-qw", k).CombinedOutput(); err != nil {
			return fmt.Errorf("sysctl %s: %v: %s", k, err, out)
		}
	}
	steps := [][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "tuntap", "add", "dev", tap, "mode", "tap"},
		{"-n", ns, "link", "set", tap, "mtu", strconv.Itoa(p.cfg.MTU)},
		{"-n", ns, "addr", "add", HostIPv4.String() + "/24", "dev", tap},
		{"-n", ns, "-6", "addr", "add", HostIPv6.String() + "/64", "dev", tap, "nodad"},
		{"-n", ns, "link", "set", tap, "up"},
	}
	for _, s := range steps {
		if err := p.ip(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// Command returns a command that runs name in the peer's namespace on the
// host (through ip netns exec, which execs it: the PID is the program's).
func (p *Peer) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.cfg.Namespace, name}, args...)...)
}

// SetMTU sets the MTU of the tap and of the guest's eth0; rxe0's active MTU
// follows (1500 gives 1024, 4200 gives 4096).
func (p *Peer) SetMTU(ctx context.Context, mtu int) error {
	if err := p.ip(ctx, "-n", p.cfg.Namespace, "link", "set", p.cfg.Tap, "mtu", strconv.Itoa(mtu)); err != nil {
		return err
	}
	r, err := p.Run(ctx, fmt.Sprintf("/usr/sbin/ip link set eth0 mtu %d", mtu))
	if err != nil {
		return err
	}
	if err := Failed(r); err != nil {
		return fmt.Errorf("peer: guest MTU %d: %w", mtu, err)
	}
	p.cfg.MTU = mtu
	return nil
}

// Close stops the guest (SIGTERM, SIGKILL after 5 s) and deletes the
// namespace with its tap. It reports processes left in the namespace, which
// it does not kill: they are not the peer's.
func (p *Peer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	if p.qemu != nil && p.qemu.Process != nil {
		p.stopQEMU()
	}
	if _, err := os.Stat("/run/netns/" + p.cfg.Namespace); err == nil {
		out, _ := exec.Command("ip", "netns", "pids", p.cfg.Namespace).Output()
		if pids := strings.Fields(string(out)); len(pids) > 0 {
			errs = append(errs, fmt.Errorf("peer: processes left in netns %s: %s", p.cfg.Namespace, strings.Join(pids, " ")))
		}
		if err := p.ip(context.Background(), "netns", "del", p.cfg.Namespace); err != nil {
			errs = append(errs, err)
		}
	}
	if !p.cfg.KeepWorkDir && p.cfg.WorkDir != "" {
		os.RemoveAll(p.cfg.WorkDir)
	}
	return errors.Join(errs...)
}

func (p *Peer) stopQEMU() {
	_ = p.qemu.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.qemuErr:
	case <-time.After(5 * time.Second):
		_ = p.qemu.Process.Kill()
		<-p.qemuErr
	}
}

// Result is how a guest command ended.
type Result = proto.Result

// Run runs a shell command line in the guest and waits for it. The context's
// deadline (if any) also bounds the command in the guest, which then ends its
// whole process group and reports TimedOut. A non-nil error means the agent
// could not be asked or did not answer; the command's own failure is in the
// Result (see Failed).
func (p *Peer) Run(ctx context.Context, cmd string) (*Result, error) {
	pr, err := p.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return pr.Wait()
}

// Proc is a command running in the guest.
type Proc struct {
	Cmd    string
	conn   net.Conn
	once   sync.Once
	res    *Result
	err    error
	done   chan struct{}
	cancel func() bool
}

// Start starts a shell command line in the guest, for example a server, and
// returns without waiting. The context bounds the command as in Run; cancel
// it, or call Stop, to end the command early.
func (p *Peer) Start(ctx context.Context, cmd string) (*Proc, error) {
	req := proto.Request{Op: proto.OpRun, Cmd: cmd}
	if dl, ok := ctx.Deadline(); ok {
		req.Timeout = time.Until(dl)
		if req.Timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	c, err := p.dialAgent(ctx)
	if err != nil {
		return nil, err
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		c.Close()
		return nil, fmt.Errorf("peer: agent: %w", err)
	}
	pr := &Proc{Cmd: cmd, conn: c, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		var r Result
		// The guest ends a timed-out command itself; allow for the kill grace.
		if err := json.NewDecoder(c).Decode(&r); err != nil {
			pr.err = fmt.Errorf("peer: agent: no result for %q: %w", cmd, err)
			return
		}
		pr.res = &r
	}()
	pr.cancel = context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The agent ends the command itself at the deadline and reports
			// TimedOut; stop it from here only if that answer does not come.
			select {
			case <-pr.done:
				return
			case <-time.After(proto.KillGrace + 5*time.Second):
			}
		}
		pr.Stop()
	})
	return pr, nil
}

// Wait waits for the command to end.
func (pr *Proc) Wait() (*Result, error) {
	<-pr.done
	pr.cancel()
	pr.conn.Close()
	return pr.res, pr.err
}

// Stop asks the agent to end the command (SIGTERM to its process group,
// SIGKILL after a grace period) and waits for it.
func (pr *Proc) Stop() (*Result, error) {
	pr.once.Do(func() {
		if cw, ok := pr.conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	})
	select {
	case <-pr.done:
	case <-time.After(proto.KillGrace + 10*time.Second):
		pr.conn.Close()
	}
	return pr.Wait()
}

// Failed describes why a command failed: it could not start, timed out or
// exited with a status other than 0. It returns nil for success.
func Failed(r *Result) error {
	switch {
	case r.Err != "":
		return fmt.Errorf("could not start: %s", r.Err)
	case r.TimedOut:
		return fmt.Errorf("timed out after %v", r.Elapsed.Round(time.Millisecond))
	case r.Status != 0:
		return fmt.Errorf("exit status %d: %s", r.Status, bytes.TrimSpace(r.Stderr))
	}
	return nil
}

// Status asks the agent for the guest's boot report.
func (p *Peer) Status(ctx context.Context) (*proto.Status, error) {
	c, err := p.dialAgent(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := json.NewEncoder(c).Encode(proto.Request{Op: proto.OpStatus}); err != nil {
		return nil, err
	}
	var st proto.Status
	if err := json.NewDecoder(c).Decode(&st); err != nil {
		return nil, fmt.Errorf("peer: agent status: %w", err)
	}
	return &st, nil
}

// dialAgent connects to the guest agent from inside the namespace.
func (p *Peer) dialAgent(ctx context.Context) (net.Conn, error) {
	var c net.Conn
	err := p.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(GuestIPv4, proto.Port).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("peer: agent: %w", err)
	}
	return c, nil
}
