package perftest

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestKeyWire(t *testing.T) {
	d := Dest{OutReads: 1, QPN: 0x11, PSN: 0x21030e, RKey: 0x2ec, VAddr: 0x555d8ecb3000, GID: netip.MustParseAddr("::ffff:192.0.2.2").As16()}
	// The client's key in write_bw.pcap.
	want := "0000:0001:000011:21030e:000002ec:0000555d8ecb3000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:\x00"
	got := d.AppendKey(nil)
	if string(got) != want || len(got) != KeySize {
		t.Fatalf("AppendKey = %q (%d bytes), want %q", got, len(got), want)
	}
	if back, err := ParseKey(got); err != nil || back != d {
		t.Fatalf("ParseKey = %+v, %v", back, err)
	}
	full := Dest{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: ^uint64(0), SRQN: 0xfedcba98}
	for i := range full.GID {
		full.GID[i] = byte(0xf0 + i)
	}
	if got := full.AppendKey(nil); len(got) != KeySize {
		t.Fatalf("AppendKey of maximal values is %d bytes", len(got))
	} else if back, err := ParseKey(got); err != nil || back != full {
		t.Fatalf("ParseKey(%q) = %+v, %v", got, back, err)
	}
	noGID := full.AppendKeyNoGID(nil)
	if want := "ffff:ffff:ffffff:ffffff:ffffffff:ffffffffffffffff:fedcba98\x00"; string(noGID) != want || len(noGID) != KeySizeNoGID {
		t.Fatalf("AppendKeyNoGID = %q, want %q", noGID, want)
	}
	back, err := ParseKey(noGID)
	full.GID = [16]byte{}
	if err != nil || back != full {
		t.Fatalf("ParseKey(no GID) = %+v, %v", back, err)
	}
	up, err := ParseKey([]byte(strings.ToUpper(want[:len(want)-1]) + "\x00"))
	if err != nil || up.VAddr != 0x555d8ecb3000 {
		t.Fatalf("ParseKey(upper case) = %+v, %v", up, err)
	}
}

func TestParseKeyErrors(t *testing.T) {
	good := "0000:0001:000011:21030e:000002ec:0000555d8ecb3000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:\x00"
	for name, msg := range map[string]string{
		"empty":          "",
		"short":          good[:107],
		"long":           good + "\x00",
		"no NUL":         good[:107] + ":",
		"bad LID":        "000x" + good[4:],
		"missing colon":  good[:4] + "-" + good[5:],
		"bad VA":         good[:40] + "g" + good[41:],
		"bad GID":        good[:51] + "z" + good[52:],
		"GID separator":  good[:52] + "." + good[53:],
		"bad SRQN":       good[:100] + "k" + good[101:],
		"no last colon":  good[:106] + "0\x00",
		"done":           "done\x00",
		"no GID, no NUL": good[:59],
		"no GID, colon":  "0000:0001:000011:21030e:000002ec:0000555d8ecb3000:00000000:",
	} {
		if _, err := ParseKey([]byte(msg)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: ParseKey(%q) error = %v, want ErrFormat", name, msg, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add([]byte("0000:0001:000011:21030e:000002ec:0000555d8ecb3000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:\x00"))
	f.Add([]byte("0000:0080:000011:b7cd0c:00000254:000055971a66e000:00000000\x00"))
	f.Add([]byte("done\x00"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParseKey(msg)
		if err != nil {
			return
		}
		var again []byte
		if len(msg) == KeySize {
			again = d.AppendKey(nil)
		} else {
			again = d.AppendKeyNoGID(nil)
		}
		if !bytes.EqualFold(again, msg) {
			t.Fatalf("ParseKey(%q) = %+v re-encodes as %q", msg, d, again)
		}
	})
}

func TestCMKeyWire(t *testing.T) {
	d := Dest{LID: 0x12, OutReads: 0x80, QPN: 0x123456, PSN: 0xabcdef, RKey: 0xdeadbeef, VAddr: 0x00007ff6b9a6f000, SRQN: 9}
	copy(d.GID[10:], []byte{0xff, 0xff, 192, 0, 2, 1})
	b := d.AppendCMKey(nil)
	if len(b) != CMKeySize {
		t.Fatalf("%d bytes", len(b))
	}
	// struct pingpong_dest on x86-64, big-endian fields.
	want := "00000012" + "00000080" + "00123456" + "00abcdef" + "deadbeef" + "00000000" + "00007ff6b9a6f000" +
		"00000000000000000000ffffc0000201" + "00000009" + "00000000"
	if got := fmt.Sprintf("%x", b); got != want {
		t.Errorf("key %s\nwant %s", got, want)
	}
	got, err := ParseCMKey(b)
	if err != nil || got != d {
		t.Errorf("parse: %+v, %v", got, err)
	}
	if _, err := ParseCMKey(b[:55]); !errors.Is(err, ErrFormat) {
		t.Errorf("short key: %v", err)
	}
}
