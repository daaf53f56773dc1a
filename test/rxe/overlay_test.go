package rxe

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The overlay is a newc archive: the parents first, then the file, then
// the trailer, every header at a multiple of 4 bytes.
func TestWriteOverlay(t *testing.T) {
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeOverlay(&b, map[string]string{"/usr/bin/tool": src}); err != nil {
		t.Fatal(err)
	}
	a := b.Bytes()
	var names []string
	for off := 0; off < len(a); {
		if off%4 != 0 || string(a[off:off+6]) != "070701" {
			t.Fatalf("no newc header at offset %d", off)
		}
		var size, nameSize int
		if _, err := fmt.Sscanf(string(a[off+54:off+62]), "%x", &size); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(string(a[off+94:off+102]), "%x", &nameSize); err != nil {
			t.Fatal(err)
		}
		name := string(a[off+110 : off+110+nameSize-1])
		names = append(names, name)
		off = (off + 110 + nameSize + 3) &^ 3
		if name == "usr/bin/tool" && string(a[off:off+size]) != "hello" {
			t.Errorf("file data %q", a[off:off+size])
		}
		off = (off + size + 3) &^ 3
	}
	want := []string{"usr", "usr/bin", "usr/bin/tool", "TRAILER!!!"}
	if len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %q, want %q", names, want)
		}
	}
}
