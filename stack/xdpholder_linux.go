package stack

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// xdpHolder describes the XDP program with ID id that an interface
// already has, and the processes that hold it (a descriptor of the
// program or of its link, as /proc/PID/fdinfo shows them), for the
// message that refuses the interface: "XDP program xdp_sock_prog (id 42),
// held by pid 812 (uroce)".
func xdpHolder(id uint32) string {
	if id == 0 {
		return ""
	}
	what := fmt.Sprintf("XDP program id %d", id)
	if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
		if info, err := p.Info(); err == nil && info.Name != "" {
			what = fmt.Sprintf("XDP program %s (id %d)", info.Name, id)
		}
		p.Close()
	}
	holders := bpfHolders("/proc", id)
	if len(holders) == 0 {
		return what + ", held by no process (pinned, or attached by a program that has ended)"
	}
	return what + ", held by " + strings.Join(holders, ", ")
}

// bpfHolders lists, as "pid N (comm)", the processes under proc whose
// descriptors refer to the BPF program id (fdinfo's prog_id line, which
// program and link descriptors have). It skips what it may not read.
func bpfHolders(proc string, id uint32) []string {
	want := []byte("prog_id:\t" + strconv.FormatUint(uint64(id), 10) + "\n")
	pids, _ := os.ReadDir(proc)
	var out []string
	for _, e := range pids {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(proc, e.Name(), "fdinfo")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			b, err := os.ReadFile(filepath.Join(dir, fd.Name()))
			if err != nil || !bytes.Contains(b, want) {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
			out = append(out, fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm))))
			break
		}
	}
	return out
}
