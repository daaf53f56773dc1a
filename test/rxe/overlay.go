package rxe

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// writeOverlay writes a newc cpio archive holding files (path in the guest
// → file on the host), with every parent directory, to w. The kernel
// unpacks archives concatenated to the initramfs in order, so this one,
// appended to the image's, adds the files to the guest's root.
func writeOverlay(w io.Writer, files map[string]string) error {
	names := make([]string, 0, len(files))
	for g := range files {
		names = append(names, g)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	ino := 1
	entry := func(name string, mode uint32, data []byte) error {
		// The header: magic and 13 fields of 8 hex digits (ino, mode,
		// uid, gid, nlink, mtime, filesize, devmajor, devminor,
		// rdevmajor, rdevminor, namesize with its NUL, check); the name
		// and the data are each padded to 4 bytes.
		nlink := 1
		if mode&0o170000 == 0o040000 {
			nlink = 2
		}
		hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
			ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		ino++
		b := append([]byte(hdr), name...)
		b = append(b, 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		_, err := w.Write(b)
		return err
	}
	for _, g := range names {
		clean := strings.TrimPrefix(path.Clean("/"+g), "/")
		if clean == "" || clean == "." {
			return fmt.Errorf("overlay: bad guest path %q", g)
		}
		var parents []string
		for d := path.Dir(clean); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := entry(parents[i], 0o040755, nil); err != nil {
				return fmt.Errorf("overlay: %w", err)
			}
		}
		data, err := os.ReadFile(files[g])
		if err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
		if err := entry(clean, 0o100755, data); err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
	}
	if err := entry("TRAILER!!!", 0, nil); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}

// overlayInitrd writes, to dst, the image's initramfs followed by an
// archive of files (see writeOverlay).
func overlayInitrd(dst, base string, files map[string]string) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	in, err := os.Open(base)
	if err != nil {
		out.Close()
		return err
	}
	_, err = io.Copy(out, in)
	in.Close()
	if err == nil {
		err = writeOverlay(out, files)
	}
	if e := out.Close(); err == nil {
		err = e
	}
	return err
}
