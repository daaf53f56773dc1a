package daemon

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// A client's own memory (proto.MemProcess) is reached through its
// /proc/PID/mem, opened when the session starts: the stack registers it
// as a backed region (stack.PD.RegisterMRBacked) whose offsets are the
// client's addresses, and its engines pread and pwrite one packet at a
// time. The file stays bound to the client's memory: once the client is
// gone, reads return nothing and the accesses fail as with a bad key.

// readable checks that the first and the last byte of length bytes at
// addr in the client's memory can be read: a region the client gives
// must be mapped when it registers it (as ibv_reg_mr pins its pages).
func readable(mem *os.File, addr, length uint64) error {
	if length == 0 || addr+length < addr || addr+length > math.MaxInt64 {
		return errnoErr{unix.EINVAL, fmt.Sprintf("reg mr: process memory: %d bytes at %#x", length, addr)}
	}
	var b [1]byte
	for _, a := range []uint64{addr, addr + length - 1} {
		if _, err := mem.ReadAt(b[:], int64(a)); err != nil {
			return errnoErr{unix.EFAULT, fmt.Sprintf("reg mr: process memory: address %#x is not readable in the client: %v", a, err)}
		}
	}
	return nil
}
