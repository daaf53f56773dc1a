package proto

import "golang.org/x/sys/unix"

// ParseFDs returns the descriptors an SCM_RIGHTS control message carried
// with a message (oob as ReadMsgUnix filled it). The receiver owns them:
// it closes those it does not keep.
func ParseFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}
