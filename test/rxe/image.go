package rxe

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

//go:embed build-image.sh packages.sh
var builderFiles embed.FS

// ErrUnavailable reports that this host cannot build or run rxe peers: not
// root, Debian packages missing and not installable, no package lists or no
// download of the kernel package. Tests skip on it.
var ErrUnavailable = errors.New("rdma_rxe peers are unavailable on this host")

// exitUnavailable is build-image.sh's exit status for ErrUnavailable.
const exitUnavailable = 3

// KernelEnv names the environment variable that chooses the default guest
// kernel when PeerOptions.Kernel and NetOptions.Kernel are empty.
const KernelEnv = "UROCE_RXE_KERNEL"

// Image is a built guest image: an uncompressed kernel for QEMU's PVH entry
// point and an initramfs.
type Image struct {
	// Kernel is the kernel as asked for ("6.1", "6.12" or a package name).
	Kernel string
	// Package is the Debian package it resolved to, e.g. linux-image-amd64.
	Package string
	// KVer is the kernel release, e.g. 6.1.0-57-amd64.
	KVer string
	// Dir is the cache directory holding the image.
	Dir string
	// Vmlinux and Initrd are the files QEMU boots.
	Vmlinux, Initrd string
	// Cached tells whether the builder found the image current.
	Cached bool
	// Took is how long the builder ran.
	Took time.Duration
}

// kernelPackage maps a kernel name to the Debian package that selects it and
// the release prefix the result must have ("" when any is fine).
//
//	"" or "6.1"   linux-image-amd64 (Debian 12's kernel)
//	"6.12"        linux-image-6.12-amd64
//	"X.Y"         linux-image-X.Y-amd64
//	"linux-image-..." that package
func kernelPackage(kernel string) (pkg, prefix string, err error) {
	switch {
	case kernel == "" || kernel == "6.1":
		return "linux-image-amd64", "6.1.", nil
	case strings.HasPrefix(kernel, "linux-image-"):
		if strings.ContainsAny(kernel, " \t\n'\"$;&|") {
			return "", "", fmt.Errorf("kernel package %q: bad name", kernel)
		}
		return kernel, "", nil
	}
	var major, minor int
	if n, _ := fmt.Sscanf(kernel, "%d.%d", &major, &minor); n != 2 || fmt.Sprintf("%d.%d", major, minor) != kernel {
		return "", "", fmt.Errorf("kernel %q: want 6.1, 6.12, X.Y or a linux-image-* package", kernel)
	}
	return "linux-image-" + kernel + "-amd64", kernel + ".", nil
}

// defaultKernel returns kernel, or the one named by $UROCE_RXE_KERNEL when
// kernel is empty.
func defaultKernel(kernel string) string {
	if kernel == "" {
		return os.Getenv(KernelEnv)
	}
	return kernel
}

type imageResult struct {
	once sync.Once
	img  *Image
	err  error
}

var (
	imagesMu sync.Mutex
	images   = map[string]*imageResult{}
)

// BuildImage returns the guest image for kernel (see PeerOptions.Kernel),
// building it with build-image.sh when the cache has no current copy. The
// result is remembered for the life of the process. Errors wrap
// ErrUnavailable when the host cannot build images at all.
func BuildImage(ctx context.Context, kernel string) (*Image, error) {
	kernel = defaultKernel(kernel)
	imagesMu.Lock()
	r := images[kernel]
	if r == nil {
		r = &imageResult{}
		images[kernel] = r
	}
	imagesMu.Unlock()
	r.once.Do(func() { r.img, r.err = runBuilder(ctx, kernel, false) })
	return r.img, r.err
}

// runBuilder runs the embedded build-image.sh for kernel.
func runBuilder(ctx context.Context, kernel string, force bool) (*Image, error) {
	pkg, prefix, err := kernelPackage(kernel)
	if err != nil {
		return nil, fmt.Errorf("build rxe image: %w", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return nil, fmt.Errorf("build rxe image: no bash: %w", ErrUnavailable)
	}
	dir, err := os.MkdirTemp("", "uroce-rxe-builder-")
	if err != nil {
		return nil, fmt.Errorf("build rxe image: %w", err)
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"build-image.sh", "packages.sh"} {
		b, err := builderFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("build rxe image: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			return nil, fmt.Errorf("build rxe image: %w", err)
		}
	}
	args := []string{filepath.Join(dir, "build-image.sh")}
	if force {
		args = append(args, "-f")
	}
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Env = append(os.Environ(), "KMETA="+pkg)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == exitUnavailable {
			return nil, fmt.Errorf("build rxe image for kernel %s: %s: %w", pkg, lastLines(stderr.String(), 3), ErrUnavailable)
		}
		return nil, fmt.Errorf("build rxe image for kernel %s: %w\n%s", pkg, err, lastLines(stderr.String(), 30))
	}
	img := &Image{Kernel: kernel, Package: pkg, Took: took}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "UROCE_RXE_DIR="); ok {
			img.Dir = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "UROCE_RXE_KVER="); ok {
			img.KVer = v
		}
	}
	if img.Dir == "" || img.KVer == "" {
		return nil, fmt.Errorf("build rxe image for kernel %s: builder printed no image directory:\n%s", pkg, lastLines(stderr.String(), 30))
	}
	if prefix != "" && !strings.HasPrefix(img.KVer, prefix) {
		return nil, fmt.Errorf("build rxe image: %s gives kernel %s here, not %s: %w", pkg, img.KVer, kernel, ErrUnavailable)
	}
	img.Cached = strings.Contains(stderr.String(), "build-image: cached:")
	img.Vmlinux = filepath.Join(img.Dir, "vmlinux")
	img.Initrd = filepath.Join(img.Dir, "initrd.cpio")
	for _, f := range []string{img.Vmlinux, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("build rxe image for kernel %s: %w", pkg, err)
		}
	}
	return img, nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
