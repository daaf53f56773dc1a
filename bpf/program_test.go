package bpf

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// The fetch-add must reach the kernel with BPF_ADD|BPF_FETCH in its
// immediate, or the drop knob never fires for n > 1.
func TestFetchAddEncoding(t *testing.T) {
	var buf bytes.Buffer
	if err := (asm.Instructions{fetchAdd(asm.R0, asm.R2, asm.Word, 4)}).Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	if len(raw) != 8 {
		t.Fatalf("%d bytes", len(raw))
	}
	const bpfStx, bpfAtomic, bpfW, bpfAdd, bpfFetch = 0x03, 0xc0, 0x00, 0x00, 0x01
	if raw[0] != bpfStx|bpfAtomic|bpfW {
		t.Errorf("opcode %#x", raw[0])
	}
	if imm := binary.LittleEndian.Uint32(raw[4:]); imm != bpfAdd|bpfFetch {
		t.Errorf("imm %#x, want BPF_ADD|BPF_FETCH", imm)
	}
	if off := binary.LittleEndian.Uint16(raw[2:]); off != 4 {
		t.Errorf("offset %d", off)
	}
}

func TestSpec(t *testing.T) {
	s := collectionSpec()
	p := s.Programs[progName]
	if p == nil || p.Flags&xdpHasFrags == 0 {
		t.Fatal("program not marked BPF_F_XDP_HAS_FRAGS")
	}
	for _, name := range []string{xsksName, cfgName, statsName, progName} {
		if len(name) > 15 {
			t.Errorf("%s longer than BPF_OBJ_NAME_LEN-1", name)
		}
	}
	maps := 0
	for _, ins := range p.Instructions {
		if ins.IsLoadFromMap() {
			maps++
			if s.Maps[ins.Reference()] == nil {
				t.Errorf("instruction references unknown map %q", ins.Reference())
			}
		}
	}
	if maps != 3 {
		t.Errorf("%d map loads, want 3", maps)
	}
	if Redirect.String() != "XDP_REDIRECT" || Action(9).String() != "XDP_ACTION(?)" {
		t.Error("Action.String")
	}
}
