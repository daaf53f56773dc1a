package interop

import (
	"bufio"
	"encoding/binary"
	"os"
	"time"

	"github.com/uroce/uroce/internal/pcaptool"
)

// writeWindow copies the frames of the capture at src whose time lies in
// [from, to] into a new classic pcap file dst (Ethernet, microsecond
// timestamps, as tcpdump writes) and returns how many it copied.
func writeWindow(src, dst string, from, to time.Time) (int, error) {
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriter(out)
	var hdr [24]byte
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 262144)
	binary.LittleEndian.PutUint32(hdr[20:], pcaptool.LinkEthernet)
	w.Write(hdr[:])
	n := 0
	err = eachFrame(src, func(_ int, f *pcaptool.Frame) {
		if f.Time.Before(from) || f.Time.After(to) || f.Data == nil {
			return
		}
		var rec [16]byte
		binary.LittleEndian.PutUint32(rec[0:], uint32(f.Time.Unix()))
		binary.LittleEndian.PutUint32(rec[4:], uint32(f.Time.Nanosecond()/1000))
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f.Data)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(f.OrigLen-f.CapLen+len(f.Data)))
		w.Write(rec[:])
		w.Write(f.Data)
		n++
	})
	if err != nil {
		out.Close()
		return n, err
	}
	if err := w.Flush(); err != nil {
		out.Close()
		return n, err
	}
	return n, out.Close()
}
