//go:build linux

package peer

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Image is a bootable guest: a Debian kernel and an initramfs holding its
// rdma_rxe modules, rdma-core's tools and the agent.
type Image struct {
	Kernel        string // uncompressed vmlinux (PVH boot) or, failing that, the vmlinuz
	Initrd        string // uncompressed newc cpio archive
	KernelVersion string // e.g. 6.1.0-27-amd64
}

// guestModules are the modules the guest loads, with everything modules.dep
// says they need; entries built into the kernel are skipped.
var guestModules = []string{
	"virtio_pci", "virtio_net", "crc32_generic", "crc32_pclmul",
	"ib_core", "ib_uverbs", "rdma_ucm", "rdma_rxe",
}

// guestPackages are the Debian packages whose programs go into the guest.
var guestPackages = []string{"ibverbs-utils", "rdmacm-utils", "perftest"}

// BuildImage builds the guest image under cacheDir. The kernel package is
// downloaded (never installed) and unpacked once per kernel version; the
// initramfs is rebuilt on every call from the host's rdma-core, perftest,
// iproute2 and busybox-static packages and a freshly built agent (a few
// seconds). logf receives progress lines.
func BuildImage(ctx context.Context, cacheDir string, logf func(string, ...any)) (*Image, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, err
	}
	kpkg, err := kernelPackage(ctx)
	if err != nil {
		return nil, err
	}
	kver := strings.TrimPrefix(kpkg, "linux-image-")
	kdir := filepath.Join(cacheDir, "kernel-"+kver)
	if _, err := os.Stat(filepath.Join(kdir, ".complete")); err != nil {
		logf("peer: downloading and unpacking %s into %s", kpkg, kdir)
		if err := unpackKernel(ctx, cacheDir, kpkg, kdir); err != nil {
			return nil, err
		}
	}
	img := &Image{KernelVersion: kver, Kernel: filepath.Join(kdir, "vmlinux")}
	if _, err := os.Stat(img.Kernel); err != nil {
		img.Kernel = filepath.Join(kdir, "boot", "vmlinuz-"+kver)
		logf("peer: no uncompressed vmlinux; booting %s (slower)", img.Kernel)
	}
	root, err := os.MkdirTemp(cacheDir, "root-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	if err := populateRoot(ctx, root, kdir, kver); err != nil {
		return nil, err
	}
	initrd := filepath.Join(cacheDir, "initramfs-"+kver+".cpio")
	if err := packCpio(ctx, root, initrd); err != nil {
		return nil, err
	}
	img.Initrd = initrd
	return img, nil
}

var kernelDep = regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*)`)

// kernelPackage resolves the versioned package linux-image-amd64 points to.
func kernelPackage(ctx context.Context) (string, error) {
	for attempt := 0; attempt < 2; attempt++ {
		out, _ := exec.CommandContext(ctx, "apt-cache", "depends", "linux-image-amd64").Output()
		if m := kernelDep.FindSubmatch(out); m != nil {
			return string(m[1]), nil
		}
		if attempt == 0 {
			if out, err := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); err != nil {
				return "", fmt.Errorf("apt-get update: %v: %s", err, out)
			}
		}
	}
	return "", errors.New("peer: apt-cache cannot resolve linux-image-amd64 (is this Debian with a kernel in its sources?)")
}

// unpackKernel downloads pkg, unpacks it into kdir and extracts an
// uncompressed vmlinux next to it.
func unpackKernel(ctx context.Context, cacheDir, pkg, kdir string) error {
	dl, err := os.MkdirTemp(cacheDir, "download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dl)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-qq", pkg)
	cmd.Dir = dl
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %v: %s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	tmp := kdir + ".tmp"
	os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x: %v: %s", err, out)
	}
	kver := strings.TrimPrefix(pkg, "linux-image-")
	// The package ships no modules.dep; depmod (kmod) writes it.
	if out, err := exec.CommandContext(ctx, "depmod", "-b", tmp, kver).CombinedOutput(); err != nil {
		return fmt.Errorf("depmod: %v: %s", err, out)
	}
	if err := extractVmlinux(ctx, filepath.Join(tmp, "boot", "vmlinuz-"+kver), filepath.Join(tmp, "vmlinux")); err != nil {
		// Not fatal: QEMU boots the bzImage too, only slower.
		os.Remove(filepath.Join(tmp, "vmlinux"))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(kdir)
	return os.Rename(tmp, kdir)
}

// extractVmlinux finds the xz stream inside a bzImage and unpacks it: QEMU
// boots the ELF directly (PVH), which saves the emulated decompression.
func extractVmlinux(ctx context.Context, bzImage, out string) error {
	b, err := os.ReadFile(bzImage)
	if err != nil {
		return err
	}
	i := bytes.Index(b, []byte("\xfd7zXZ\x00"))
	if i < 0 {
		return errors.New("no xz stream in the kernel image")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(b[i:])
	cmd.Stdout = f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xz: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	e, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("unpacked kernel is not ELF: %w", err)
	}
	return e.Close()
}

// populateRoot fills the initramfs staging directory.
func populateRoot(ctx context.Context, root, kdir, kver string) error {
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc/srdma", "proc", "sys", "dev", "run", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+d, filepath.Join(root, d)); err != nil {
			return err
		}
	}
	if err := installModules(ctx, root, kdir, kver); err != nil {
		return err
	}
	if err := installPrograms(ctx, root); err != nil {
		return err
	}
	if err := installAgent(ctx, root); err != nil {
		return err
	}
	files := map[string]string{
		"etc/inittab": "::sysinit:/usr/sbin/srdma-agent setup\n" +
			"::respawn:/usr/sbin/srdma-agent serve\n",
		"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":      "root:x:0:\n",
		"etc/hostname":   "srdma-peer\n",
		"etc/hosts":      "127.0.0.1 localhost\n" + HostIPv4.String() + " host\n" + GuestIPv4.String() + " guest\n",
		"etc/ld.so.conf": "/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if out, err := exec.CommandContext(ctx, "ldconfig", "-r", root).CombinedOutput(); err != nil {
		return fmt.Errorf("ldconfig -r: %v: %s", err, out)
	}
	// The kernel opens /dev/console before init mounts devtmpfs.
	return mknodConsole(filepath.Join(root, "dev", "console"))
}

// installModules copies guestModules and their dependencies and lists them,
// dependencies first, in etc/srdma/modules for the agent to load.
func installModules(ctx context.Context, root, kdir, kver string) error {
	mdir := filepath.Join(kdir, "lib", "modules", kver)
	deps, err := readModulesDep(filepath.Join(mdir, "modules.dep"))
	if err != nil {
		return err
	}
	builtin, _ := os.ReadFile(filepath.Join(mdir, "modules.builtin"))
	order, err := moduleOrder(guestModules, deps, string(builtin))
	if err != nil {
		return err
	}
	var list []string
	for _, rel := range order {
		dst := filepath.Join(root, "lib", "modules", kver, strings.TrimSuffix(rel, ".xz"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if strings.HasSuffix(rel, ".xz") {
			err = xzUnpack(ctx, filepath.Join(mdir, rel), dst)
		} else {
			err = copyFile(filepath.Join(mdir, rel), dst)
		}
		if err != nil {
			return err
		}
		list = append(list, "/lib/modules/"+kver+"/"+strings.TrimSuffix(rel, ".xz"))
	}
	return os.WriteFile(filepath.Join(root, "etc/srdma/modules"), []byte(strings.Join(list, "\n")+"\n"), 0o644)
}

// readModulesDep parses modules.dep: "kernel/a.ko: kernel/b.ko kernel/c.ko".
func readModulesDep(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{}
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		mod, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
	}
	return deps, s.Err()
}

// moduleName is the name a module file stands for, with '-' as '_'.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// moduleOrder resolves the wanted module names to modules.dep paths and
// returns them with their dependencies, each after everything it needs.
// Modules listed in modules.builtin are skipped.
func moduleOrder(want []string, deps map[string][]string, builtin string) ([]string, error) {
	byName := map[string]string{}
	for p := range deps {
		byName[moduleName(p)] = p
	}
	isBuiltin := map[string]bool{}
	for _, l := range strings.Fields(builtin) {
		isBuiltin[moduleName(l)] = true
	}
	seen := map[string]bool{}
	var order []string
	var add func(p string)
	add = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, d := range deps[p] {
			add(d)
		}
		order = append(order, p)
	}
	for _, w := range want {
		n := strings.ReplaceAll(w, "-", "_")
		p, ok := byName[n]
		if !ok {
			if isBuiltin[n] {
				continue
			}
			return nil, fmt.Errorf("peer: kernel module %s is neither in modules.dep nor built in", w)
		}
		add(p)
	}
	return order, nil
}

// installPrograms copies the rdma tools, iproute2's ip and rdma, the rxe
// verbs provider, their shared libraries (found with ldd) and busybox.
func installPrograms(ctx context.Context, root string) error {
	var bins []string
	for _, pkg := range guestPackages {
		out, err := exec.CommandContext(ctx, "dpkg", "-L", pkg).Output()
		if err != nil {
			return fmt.Errorf("dpkg -L %s: %v (is it installed?)", pkg, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "/usr/bin/") || strings.HasPrefix(l, "/usr/sbin/") {
				if fi, err := os.Stat(l); err == nil && fi.Mode().IsRegular() {
					bins = append(bins, l)
				}
			}
		}
	}
	for _, tool := range []string{"ip", "rdma"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("peer: %s (iproute2) not found: %w", tool, err)
		}
		p, _ = filepath.EvalSymlinks(p)
		bins = append(bins, p)
	}
	provs, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so")
	if len(provs) == 0 {
		return errors.New("peer: the rxe verbs provider (ibverbs-providers) is not installed")
	}
	extra := append(provs, "/etc/libibverbs.d/rxe.driver")
	// glibc dlopen()s libgcc_s for thread cancellation (rping needs it).
	if g, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"); len(g) > 0 {
		extra = append(extra, g[0])
	}
	libs, err := sharedLibs(ctx, append(append([]string{}, bins...), provs...))
	if err != nil {
		return err
	}
	for _, f := range append(append(bins, extra...), libs...) {
		if err := copyInto(root, f); err != nil {
			return err
		}
	}
	// The guest's ip and rdma live in /usr/sbin whatever the host layout.
	for _, tool := range []string{"ip", "rdma"} {
		if _, err := os.Stat(filepath.Join(root, "usr/sbin", tool)); err != nil {
			p, _ := exec.LookPath(tool)
			p, _ = filepath.EvalSymlinks(p)
			if err := copyFile(p, filepath.Join(root, "usr/sbin", tool)); err != nil {
				return err
			}
		}
	}
	return installBusybox(ctx, root)
}

// sharedLibs lists the shared libraries (and the dynamic loader) the given
// ELF files need, as ldd resolves them on this host.
func sharedLibs(ctx context.Context, files []string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", files...).Output()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("ldd: %w", err)
	}
	set := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			set[f[2]] = true
		case len(f) >= 1 && strings.HasPrefix(f[0], "/") && strings.Contains(f[0], "ld-linux"):
			set[f[0]] = true
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd: %s", strings.TrimSpace(l))
		}
	}
	libs := make([]string, 0, len(set))
	for l := range set {
		libs = append(libs, l)
	}
	sort.Strings(libs)
	return libs, nil
}

// installBusybox copies a static busybox and links its applets where no
// real program of that name was installed; busybox is also init.
func installBusybox(ctx context.Context, root string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return errors.New("peer: busybox not found (install busybox-static)")
	}
	if e, err := elf.Open(bb); err == nil {
		dynamic := false
		for _, p := range e.Progs {
			if p.Type == elf.PT_INTERP {
				dynamic = true
			}
		}
		e.Close()
		if dynamic {
			return fmt.Errorf("peer: %s is dynamically linked; install busybox-static", bb)
		}
	}
	if err := copyFile(bb, filepath.Join(root, "usr/bin/busybox")); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(out)) {
		if exists(filepath.Join(root, "usr/bin", a)) || exists(filepath.Join(root, "usr/sbin", a)) {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "usr/bin", a)); err != nil {
			return err
		}
	}
	return os.Symlink("usr/bin/busybox", filepath.Join(root, "init"))
}

// installAgent builds the guest agent statically into usr/sbin.
func installAgent(ctx context.Context, root string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("peer: the go tool is needed to build the guest agent: %w", err)
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-o", filepath.Join(root, "usr/sbin/srdma-agent"),
		"github.com/softrdma/softrdma/interop/peer/agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the guest agent: %v: %s", err, out)
	}
	return nil
}

// packCpio writes root as an uncompressed newc archive (unpacking gzip in
// an emulated guest costs more than the smaller file saves).
func packCpio(ctx context.Context, root, out string) error {
	var list bytes.Buffer
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		list.WriteString(rel + "\n")
		return nil
	})
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "cpio", "-o", "-H", "newc", "--quiet")
	cmd.Dir = root
	cmd.Stdin = &list
	cmd.Stdout = f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cpio: %v: %s", err, stderr.String())
	}
	return os.Rename(tmp, out)
}

// copyInto copies the host file path to the same path under root,
// following symlinks.
func copyInto(root, path string) error {
	dst := filepath.Join(root, path)
	if exists(dst) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return copyFile(path, dst)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func xzUnpack(ctx context.Context, src, dst string) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, "xz", "-dc", src)
	cmd.Stdout = out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xz -d %s: %w", src, err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func mknodConsole(path string) error {
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(5, 1))); err != nil {
		return fmt.Errorf("mknod %s: %w", path, err)
	}
	return nil
}
