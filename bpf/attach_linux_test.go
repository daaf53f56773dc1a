package bpf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"testing"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

// xdpState reads the XDP attachment of dev from the kernel: mode 0 none, 1
// native, 2 generic; and the attached program's ID.
func xdpState(t *testing.T, ns *netns.Namespace, dev string) (mode int, progID uint32) {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name(), "-j", "-d", "link", "show", "dev", dev).Output()
	if err != nil {
		t.Fatalf("ip link show: %v", err)
	}
	var links []struct {
		XDP *struct {
			Mode int `json:"mode"`
			Prog struct {
				ID uint32 `json:"id"`
			} `json:"prog"`
		} `json:"xdp"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("parse %q: %v", out, err)
	}
	if links[0].XDP == nil {
		return 0, 0
	}
	return links[0].XDP.Mode, links[0].XDP.Prog.ID
}

func progID(t *testing.T, p *Program) uint32 {
	t.Helper()
	info, err := p.prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("no program ID")
	}
	return uint32(id)
}

func TestAttach(t *testing.T) {
	requireBPF(t)
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			pair := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-bpf", MTU: mtu, NoAddrs: true})
			p := loadForTest(t)
			id := progID(t, p)
			for _, tc := range []struct {
				mode     Mode
				wantMode Mode
				kernel   int
			}{{Native, Native, 1}, {Generic, Generic, 2}, {Auto, Native, 1}} {
				err := pair.A.Do(func() error { return p.Attach(pair.IndexA, tc.mode) })
				if err != nil {
					t.Fatalf("Attach(%v): %v", tc.mode, err)
				}
				if ifindex, m, ok := p.Attached(); !ok || m != tc.wantMode || ifindex != pair.IndexA {
					t.Errorf("Attached after Attach(%v) = %d, %v, %v", tc.mode, ifindex, m, ok)
				}
				if mode, got := xdpState(t, pair.A, pair.DevA); mode != tc.kernel || got != id {
					t.Errorf("Attach(%v): kernel shows mode %d prog %d, want mode %d prog %d", tc.mode, mode, got, tc.kernel, id)
				}
				err = pair.A.Do(func() error { return p.Attach(pair.IndexA, tc.mode) })
				if !errors.Is(err, ErrAttached) {
					t.Errorf("second Attach(%v) = %v, want ErrAttached", tc.mode, err)
				}
				if err := p.Detach(); err != nil {
					t.Fatal(err)
				}
				if mode, _ := xdpState(t, pair.A, pair.DevA); mode != 0 {
					t.Errorf("after Detach the kernel shows XDP mode %d", mode)
				}
			}
			if err := p.Detach(); err == nil {
				t.Error("Detach of a detached interface succeeded")
			}
		})
	}
}

// Another program on the interface is neither replaced by Attach nor
// removed by Close.
func TestAttachLeavesForeignProgram(t *testing.T) {
	requireBPF(t)
	pair := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-bpff", NoAddrs: true})
	first, second := loadForTest(t), loadForTest(t)
	if err := pair.B.Do(func() error { return first.Attach(pair.IndexB, Generic) }); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Mode{Auto, Native, Generic} {
		if err := pair.B.Do(func() error { return second.Attach(pair.IndexB, m) }); err == nil {
			t.Errorf("Attach(%v) over another program succeeded", m)
		}
		if _, _, ok := second.Attached(); ok {
			t.Errorf("failed Attach(%v) recorded an attachment", m)
		}
	}
	// Attached to A's end instead, the second program works.
	if err := pair.A.Do(func() error { return second.Attach(pair.IndexA, Generic) }); err != nil {
		t.Fatal(err)
	}
	// One program serves one interface.
	if err := pair.A.Do(func() error { return first.Attach(pair.IndexA, Generic) }); !errors.Is(err, ErrAttached) {
		t.Errorf("attaching an attached program elsewhere: %v, want ErrAttached", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if mode, _ := xdpState(t, pair.A, pair.DevA); mode != 0 {
		t.Errorf("after Close the kernel shows XDP mode %d on %s", mode, pair.DevA)
	}
	if mode, id := xdpState(t, pair.B, pair.DevB); mode != 2 || id != progID(t, first) {
		t.Errorf("after the other program closed: mode %d prog %d, want 2 %d", mode, id, progID(t, first))
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if mode, _ := xdpState(t, pair.B, pair.DevB); mode != 0 {
		t.Errorf("after Close the kernel shows XDP mode %d", mode)
	}
}
