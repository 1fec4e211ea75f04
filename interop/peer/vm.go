//go:build linux

package peer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// kvmTimeout bounds a KVM boot before auto mode falls back to TCG.
const kvmTimeout = 30 * time.Second

// bootVM starts QEMU with the accelerator the config asks for and waits for
// the agent's status. In auto mode a KVM failure falls back to TCG.
func (p *Peer) bootVM(ctx context.Context) error {
	accel := p.cfg.Accel
	if accel == "auto" {
		if why := kvmUnusable(); why != "" {
			p.cfg.Logf("peer: not trying KVM: %s; using TCG (emulation)", why)
			accel = "tcg"
		}
	}
	switch accel {
	case "kvm", "tcg":
		return p.tryBoot(ctx, accel, p.cfg.BootTimeout)
	case "auto":
		err := p.tryBoot(ctx, "kvm", min(kvmTimeout, p.cfg.BootTimeout))
		if err == nil {
			return nil
		}
		p.cfg.Logf("peer: KVM boot failed (%v); falling back to TCG", err)
		return p.tryBoot(ctx, "tcg", p.cfg.BootTimeout)
	}
	return fmt.Errorf("peer: accel %q: want auto, kvm or tcg", accel)
}

// kvmUnusable says why KVM cannot work here, or "" if it may.
func kvmUnusable() string {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err.Error()
	}
	f.Close()
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return "the host's KVM is kvm_pvm, which only runs PVM-enabled guest kernels"
	}
	return ""
}

// tryBoot starts QEMU and waits up to timeout for the guest to be ready. On
// failure QEMU is stopped.
func (p *Peer) tryBoot(ctx context.Context, accel string, timeout time.Duration) error {
	cpu := "max"
	if accel == "kvm" {
		cpu = "host"
	}
	appendLine := strings.Join([]string{
		"console=ttyS0", "quiet", "panic=-1",
		"srdma.ip4=" + GuestIPv4.String() + "/24",
		"srdma.ip6=" + GuestIPv6.String() + "/64",
		fmt.Sprintf("srdma.mtu=%d", p.cfg.MTU),
	}, " ")
	if err := os.WriteFile(p.console, nil, 0o644); err != nil {
		return err
	}
	qemuLog := filepath.Join(p.cfg.WorkDir, "qemu-"+accel+".log")
	logf, err := os.Create(qemuLog)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{
		"netns", "exec", p.cfg.Namespace,
		"qemu-system-x86_64", "-accel", accel, "-cpu", cpu,
		"-M", "q35", "-m", fmt.Sprint(p.cfg.MemMiB), "-smp", fmt.Sprint(p.cfg.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", p.img.Kernel, "-initrd", p.img.Initrd, "-append", appendLine,
		"-serial", "file:" + p.console,
		"-netdev", "tap,id=n0,ifname=" + p.cfg.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + GuestMAC + ",romfile=",
	}
	// Not CommandContext: the peer outlives the boot context.
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test process dies, so does the guest.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	qemuErr := make(chan error, 1)
	if err := onPinnedThread(cmd.Start, func() { qemuErr <- cmd.Wait() }); err != nil {
		return fmt.Errorf("peer: starting qemu: %w", err)
	}
	p.qemu, p.qemuErr, p.accel = cmd, qemuErr, accel

	err = p.waitReady(ctx, timeout)
	if err != nil {
		p.stopQEMU()
		p.qemu = nil
		msg, _ := os.ReadFile(qemuLog)
		return fmt.Errorf("%w\nqemu: %s\nconsole tail:\n%s", err, strings.TrimSpace(string(msg)), tail(p.Console(), 20))
	}
	return nil
}

// waitReady polls the agent until the guest reports its boot status.
func (p *Peer) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-p.qemuErr:
			p.qemuErr <- err // for stopQEMU
			return fmt.Errorf("peer: qemu exited during boot: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("peer: guest not ready within %v (%s)", timeout, p.accel)
		case <-tick.C:
		}
		if !strings.Contains(p.Console(), "srdma-peer:") {
			continue // the agent's first console line comes before it listens
		}
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := p.Status(sctx)
		scancel()
		if err != nil {
			continue
		}
		if !st.Ready {
			if strings.Contains(st.Log, "failed") {
				return fmt.Errorf("peer: guest setup failed:\n%s", st.Log)
			}
			continue
		}
		return nil
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
