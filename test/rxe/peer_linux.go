package rxe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// qemuBinary is the emulator the guests run in.
const qemuBinary = "qemu-system-x86_64"

// nicPropsRE matches PeerOptions.NIC: empty, or name=value pairs.
var nicPropsRE = regexp.MustCompile(`^([a-z][a-z0-9_-]*=[A-Za-z0-9_.-]+(,[a-z][a-z0-9_-]*=[A-Za-z0-9_.-]+)*)?$`)

// DefaultTimeout bounds a guest's life when PeerOptions.Timeout is zero.
const DefaultTimeout = 5 * time.Minute

// exitGrace is how long a guest may take to power off after its script
// ended before it is killed.
const exitGrace = 15 * time.Second

// PeerOptions describes one rdma_rxe guest. Zero fields take the defaults
// documented on each.
type PeerOptions struct {
	// Name tags the guest's console lines, names its log files and is its
	// host name. Default: "rxe" and the last octet of its address.
	Name string
	// IP is the guest's address with prefix length. Default: the lowest
	// free one of 192.0.2.1/24, 192.0.2.2/24, ...
	IP string
	// MTU is eth0's MTU: 1500 (the default) gives rxe a path MTU of 1024,
	// 9000 gives 4096.
	MTU int
	// Script is run by the guest's shell (dash) in /tmp once rxe0 is ready;
	// its exit status is the peer's. The stock tools, ip, tc, rdma,
	// tcpdump and busybox are on $PATH, plus two helpers: `retry N cmd...`
	// (run cmd until it succeeds, at most N times, 0.2 s apart) and
	// `rxe-info` (port state and GIDs). Default: `ibv_devinfo -v`.
	Script string
	// Netem, when set, is applied to the guest's eth0 before the script
	// runs, as `tc qdisc add dev eth0 root netem <Netem>`, e.g. "loss 5%".
	Netem string
	// Kernel chooses the guest kernel: "6.1" (Debian 12's linux-image-amd64),
	// "6.12" (linux-image-6.12-amd64), "X.Y" or a linux-image-* package.
	// Default: NetOptions.Kernel, else $UROCE_RXE_KERNEL, else "6.1".
	Kernel string
	// Timeout bounds the guest's life: it is killed after it. Default
	// DefaultTimeout.
	Timeout time.Duration
	// MemoryMB is the guest's memory. Default 1024.
	MemoryMB int
	// NIC holds more properties of the guest's virtio-net-pci device,
	// comma-separated, e.g. "iommu_platform=on,disable-legacy=on" (the
	// DMA API that virtio-net's AF_XDP zero-copy needs). Default: none.
	NIC string
	// KernelArgs are appended to the guest kernel's command line, e.g.
	// "uroce_ipv6=1".
	KernelArgs []string
	// Files are added to the guest's root: path in the guest (e.g.
	// "/usr/bin/uroce") → file on the host, made executable. They go in an
	// archive appended to a copy of the image's initramfs (NAME.initrd in
	// the log directory), so the cached image stays as it is.
	Files map[string]string
}

// Result is how a guest's script ended.
type Result struct {
	// Output is what the script wrote (stdout and stderr), without any boot
	// message. Lines end in "\n".
	Output string
	// ExitCode is the script's exit status.
	ExitCode int
}

// Peer is a running rdma_rxe guest.
type Peer struct {
	// Name is the guest's name (PeerOptions.Name).
	Name string
	// Addr is its address on the bridge; its RoCE v2 GID at index 1 is
	// ::ffff:Addr.
	Addr netip.Prefix
	// MAC is its NIC's MAC address, 52:54:00:00:02:NN.
	MAC net.HardwareAddr
	// Tap is its tap device on the bridge.
	Tap string
	// Image is the guest image it booted.
	Image *Image
	// LogPath is its serial log, one line per console line with the time
	// since QEMU started.
	LogPath string

	mu         sync.Mutex
	cmd        *exec.Cmd // set once QEMU started
	start      time.Time
	con        *console
	changed    chan struct{} // closed and replaced on every console line
	stderr     strings.Builder
	readyAfter time.Duration
	killReason string

	ready  chan struct{} // closed at READY
	exited chan struct{} // closed at EXIT
	done   chan struct{} // closed when QEMU has exited and its output is read
}

// StartPeer boots a guest on the network's bridge and returns at once; use
// Ready to wait until rxe0 is up and Wait for the script's result. ctx bounds
// the guest's whole life: when it is done, QEMU is killed. The guest is also
// killed when the test ends.
func (n *Net) StartPeer(ctx context.Context, opts PeerOptions) (*Peer, error) {
	if opts.Kernel == "" {
		opts.Kernel = n.kernel
	}
	img, err := BuildImage(ctx, opts.Kernel)
	if err != nil {
		return nil, fmt.Errorf("start rxe peer: %w", err)
	}
	if opts.Name != "" && (len(opts.Name) > 32 || strings.ContainsAny(opts.Name, " \t\n/[]")) {
		return nil, fmt.Errorf("start rxe peer: bad name %q", opts.Name)
	}
	for _, a := range opts.KernelArgs {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			return nil, fmt.Errorf("start rxe peer: bad kernel argument %q", a)
		}
	}
	if !nicPropsRE.MatchString(opts.NIC) {
		return nil, fmt.Errorf("start rxe peer: bad NIC properties %q: want name=value,... (letters, digits, _ - .)", opts.NIC)
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	if opts.MTU < 576 || opts.MTU > bridgePortMTU {
		return nil, fmt.Errorf("start rxe peer: MTU %d out of 576..%d", opts.MTU, bridgePortMTU)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MemoryMB == 0 {
		opts.MemoryMB = 1024
	}
	script := opts.Script
	if script == "" {
		script = "ibv_devinfo -v"
	}
	if opts.Netem != "" {
		script = "tc qdisc add dev eth0 root netem " + opts.Netem + " || exit 125\n" + script
	}

	p := &Peer{
		Image:   img,
		changed: make(chan struct{}),
		ready:   make(chan struct{}),
		exited:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	// The address is picked and the peer registered in one step, so that
	// concurrent starts never share an address.
	n.mu.Lock()
	pfx, err := n.pickAddrLocked(opts.IP)
	if err != nil {
		n.mu.Unlock()
		return nil, fmt.Errorf("start rxe peer: %w", err)
	}
	last := pfx.Addr().As4()[3]
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("rxe%d", last)
	}
	p.Name = opts.Name
	p.Addr = pfx
	p.MAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x00, 0x02, last}
	p.LogPath = filepath.Join(n.LogDir, opts.Name+".log")
	p.con = newConsole(opts.Name)
	n.peers = append(n.peers, p)
	n.mu.Unlock()
	started := false
	defer func() {
		if !started {
			close(p.done)
		}
	}()

	scriptPath := filepath.Join(n.LogDir, opts.Name+".sh")
	if err := os.WriteFile(scriptPath, []byte(script+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("start rxe peer %s: %w", p.Name, err)
	}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		return nil, fmt.Errorf("start rxe peer %s: %w", p.Name, err)
	}
	initrd := img.Initrd
	if len(opts.Files) > 0 {
		initrd = filepath.Join(n.LogDir, opts.Name+".initrd")
		if err := overlayInitrd(initrd, img.Initrd, opts.Files); err != nil {
			logFile.Close()
			return nil, fmt.Errorf("start rxe peer %s: %w", p.Name, err)
		}
	}
	if p.Tap, err = n.newTap(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start rxe peer %s: %w", p.Name, err)
	}

	cmdline := []string{
		"console=ttyS0", "quiet", "loglevel=4", "panic=-1", "mitigations=off",
		"tsc=reliable", "no_timer_check", "random.trust_cpu=on",
		"uroce_name=" + p.Name, "uroce_ip=" + pfx.String(), "uroce_mtu=" + strconv.Itoa(opts.MTU),
	}
	if n.ipv6 {
		cmdline = append(cmdline, "uroce_ipv6=1")
	}
	cmdline = append(cmdline, opts.KernelArgs...)
	// romfile= : no iPXE option ROM; the tap is the only NIC.
	nic := "virtio-net-pci,netdev=n0,mac=" + p.MAC.String() + ",romfile="
	if opts.NIC != "" {
		nic += "," + opts.NIC
	}
	args := []string{
		"netns", "exec", n.NS, qemuBinary,
		"-name", "uroce-rxe-" + p.Name,
		"-accel", "tcg,thread=single", "-cpu", "max", "-smp", "1", "-m", strconv.Itoa(opts.MemoryMB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "stdio", "-monitor", "none",
		"-kernel", img.Vmlinux, "-initrd", initrd,
		"-append", strings.Join(cmdline, " "),
		"-fw_cfg", "name=opt/uroce/script,file=" + scriptPath,
		"-netdev", "tap,id=n0,ifname=" + p.Tap + ",script=no,downscript=no",
		"-device", nic,
	}
	// `ip netns exec` execs QEMU, so the PID started is QEMU's.
	cmd := exec.Command("ip", args...)
	// Should the test binary die without its cleanup, QEMU dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start rxe peer %s: %w", p.Name, err)
	}
	cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	p.mu.Lock()
	p.start = time.Now()
	err = cmd.Start()
	if err == nil {
		p.cmd = cmd
	}
	p.mu.Unlock()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start rxe peer %s: %w", p.Name, err)
	}
	started = true
	go p.read(stdout, logFile)
	go p.watch(ctx, opts.Timeout)
	return p, nil
}

// lockedWriter appends to a strings.Builder under a mutex.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// read follows the serial console until QEMU exits.
func (p *Peer) read(stdout io.Reader, logFile *os.File) {
	defer close(p.done)
	defer logFile.Close()
	log := bufio.NewWriter(logFile)
	r := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			since := time.Since(p.start)
			line = strings.TrimSuffix(line, "\n")
			fmt.Fprintf(log, "[+%7.3fs] %s\n", since.Seconds(), strings.TrimSuffix(line, "\r"))
			log.Flush()
			p.mu.Lock()
			ev := p.con.feed(line)
			switch ev {
			case evReady:
				p.readyAfter = since
				close(p.ready)
			case evExit:
				close(p.exited)
			}
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	cmd.Wait()
}

// watch kills QEMU when ctx is done, when the timeout passes, or when the
// guest does not power off soon after its script ended.
func (p *Peer) watch(ctx context.Context, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-p.done:
		return
	case <-ctx.Done():
		p.kill("context done: " + ctx.Err().Error())
		return
	case <-deadline.C:
		p.kill(fmt.Sprintf("timed out after %v", timeout))
		return
	case <-p.exited:
	}
	grace := time.NewTimer(exitGrace)
	defer grace.Stop()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill("context done: " + ctx.Err().Error())
	case <-grace.C:
		p.kill(fmt.Sprintf("no power-off %v after the script ended", exitGrace))
	}
}

// kill sends SIGKILL to QEMU, by PID, unless it has exited.
func (p *Peer) kill(reason string) {
	select {
	case <-p.done:
		return
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	if p.killReason == "" {
		p.killReason = reason
	}
	p.cmd.Process.Kill()
}

// Kill stops the guest at once (SIGKILL to QEMU) and waits until it is gone.
func (p *Peer) Kill() {
	p.kill("killed")
	<-p.done
}

// finished reports whether QEMU has exited.
func (p *Peer) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Ready returns once the guest printed READY: rxe0 is ACTIVE and has its
// IPv4 GID. It fails when the guest ends or fails first, or when ctx is done.
func (p *Peer) Ready(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		select {
		case <-p.ready:
			return nil
		default:
		}
		return p.failure("never became ready")
	case <-ctx.Done():
		return fmt.Errorf("rxe peer %s: wait for ready: %w", p.Name, ctx.Err())
	}
}

// ReadyAfter returns how long the guest took from QEMU's start to READY
// (zero before READY).
func (p *Peer) ReadyAfter() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readyAfter
}

// WaitOutput returns once the script's output contains s. It fails when the
// guest ends first or when ctx is done.
func (p *Peer) WaitOutput(ctx context.Context, s string) error {
	for {
		p.mu.Lock()
		found := strings.Contains(p.con.output(), s)
		changed := p.changed
		p.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-p.done:
			p.mu.Lock()
			found := strings.Contains(p.con.output(), s)
			p.mu.Unlock()
			if found {
				return nil
			}
			return p.failure(fmt.Sprintf("ended without printing %q", s))
		case <-ctx.Done():
			return fmt.Errorf("rxe peer %s: wait for %q: %w", p.Name, s, ctx.Err())
		}
	}
}

// Output returns what the script has written so far.
func (p *Peer) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.con.output()
}

// Log returns the whole serial console log so far.
func (p *Peer) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.con.log.String()
}

func (p *Peer) logTail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.con.tail(n)
}

// Wait waits until the guest has powered off and returns its script's output
// and exit status. It fails when the guest ended without running the script
// to its end (boot failure, timeout, killed) or when ctx is done; the guest
// keeps running in that last case.
func (p *Peer) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("rxe peer %s: wait: %w", p.Name, ctx.Err())
	}
	p.mu.Lock()
	res := Result{Output: p.con.output(), ExitCode: p.con.exitCode}
	exited := p.con.phase == phaseExited
	p.mu.Unlock()
	if !exited {
		return Result{Output: res.Output}, p.failure("ended before its script did")
	}
	return res, nil
}

// ErrPeerFailed reports a guest that ended before it should have; the error
// message says why, with the end of its serial log.
var ErrPeerFailed = errors.New("rxe peer failed")

// failure builds the error for a guest that ended early or failed.
func (p *Peer) failure(what string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var why []string
	if p.con.fail != "" {
		why = append(why, "guest: "+p.con.fail)
	}
	if p.killReason != "" {
		why = append(why, "killed: "+p.killReason)
	}
	if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Success() && p.killReason == "" {
		why = append(why, "qemu: "+p.cmd.ProcessState.String())
	}
	if s := strings.TrimSpace(p.stderr.String()); s != "" {
		why = append(why, "qemu stderr: "+lastLines(s, 5))
	}
	return fmt.Errorf("rxe peer %s %s (%s): %w; serial log %s ends:\n%s",
		p.Name, what, strings.Join(why, "; "), ErrPeerFailed, p.LogPath, p.con.tail(25))
}
