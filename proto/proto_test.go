package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"
	"unsafe"
)

// The sizes C mirrors of these structs must match (SPEC.md).
func TestBodySizes(t *testing.T) {
	for _, c := range []struct {
		v    any
		size int
	}{
		{Hello{}, 8}, {HelloResp{}, 144}, {Handle{}, 8}, {RegMR{}, 40}, {RegMRResp{}, 16},
		{CreateCQ{}, 16}, {CreateCQResp{}, 16}, {CreateSRQ{}, 16}, {CreateSRQResp{}, 24},
		{CreateQP{}, 48}, {CreateQPResp{}, 56}, {AHAttr{}, 36}, {QPAttr{}, 84}, {ModifyQP{}, 92},
		{QueryQPResp{}, 132}, {CreateAH{}, 44}, {CreateAHResp{}, 12}, {IndexReq{}, 8}, {GIDResp{}, 24},
		{DeviceAttr{}, 200}, {McastReq{}, 24}, {AllocMW{}, 8}, {AllocMWResp{}, 8}, {BindMW{}, 48}, {BindMWResp{}, 8}, {PortAttr{}, 52},
		{CMAddr{}, 24}, {CMCreateID{}, 16}, {CMMigrateID{}, 8}, {CMBind{}, 32}, {CMResolve{}, 56},
		{CMRoute{}, 96}, {CMListen{}, 8}, {CMConnParam{}, 216}, {CMConnect{}, 224}, {CMReject{}, 156},
		{CMEvent{}, 364}, {CMInitQPAttr{}, 8}, {CMQPAttr{}, 92}, {ResizeCQ{}, 8}, {ResizeSRQ{}, 8}, {ResizeSRQResp{}, 24},
	} {
		if n := binary.Size(c.v); n != c.size {
			t.Errorf("%T: %d bytes, want %d", c.v, n, c.size)
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	in := ModifyQP{QP: 7, Mask: 0x1ff, Attr: QPAttr{State: 3, PathMTU: 5, RQPSN: 0xabcdef, Timeout: 14,
		AH: AHAttr{DGID: [16]byte{0: 0xfe, 15: 1}, SGIDIndex: 1, DMAC: [6]byte{2, 0, 0, 0, 0, 9}}}}
	msg, err := Marshal(Header{Op: OpModifyQP, Seq: 42}, &in)
	if err != nil {
		t.Fatal(err)
	}
	h, body, err := ParseHeader(msg)
	if err != nil || h.Op != OpModifyQP || h.Seq != 42 || int(h.Len) != binary.Size(in) {
		t.Fatalf("header %+v, %v", h, err)
	}
	var out ModifyQP
	if err := Unmarshal(body, &out); err != nil || out != in {
		t.Fatalf("got %+v, %v", out, err)
	}
	// A shorter body (an older peer) leaves the rest zero.
	var short ModifyQP
	if err := Unmarshal(body[:8], &short); err != nil || short.QP != 7 || short.Attr != (QPAttr{}) {
		t.Fatalf("short body: %+v, %v", short, err)
	}
	// A longer one (a newer peer) is read as far as the struct goes.
	var long ModifyQP
	if err := Unmarshal(append(bytes.Clone(body), 1, 2, 3), &long); err != nil || long != in {
		t.Fatalf("long body: %+v, %v", long, err)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	if _, _, err := ParseHeader(make([]byte, 15)); !errors.Is(err, ErrShort) {
		t.Errorf("short: %v", err)
	}
	msg, _ := Marshal(Header{Op: OpAllocPD}, nil)
	binary.LittleEndian.PutUint32(msg[8:], 4)
	if _, _, err := ParseHeader(msg); !errors.Is(err, ErrBadBody) {
		t.Errorf("length mismatch: %v", err)
	}
	if _, _, err := ParseHeader(make([]byte, MaxMessage+1)); !errors.Is(err, ErrLong) {
		t.Errorf("long: %v", err)
	}
}

func TestSlotsRoundTrip(t *testing.T) {
	b := make([]byte, SendSlotBytes(4, 0))
	s := SendSlot{ID: 1, Opcode: WRFetchAdd, Flags: SendSignaled, NumSGE: 2, Imm: 3, RemoteAddr: 4, RKey: 5,
		AH: 6, CompareAdd: 7, Swap: 8, RemoteQPN: 9, RemoteQKey: 10, InlineLen: 11}
	s.Put(b)
	PutSGE(b, SendSlotHeader, 1, 0x1000, 64, 0x77)
	var g SendSlot
	g.Get(b)
	if g != s {
		t.Fatalf("send slot %+v, want %+v", g, s)
	}
	if a, l, k := GetSGE(b, SendSlotHeader, 1); a != 0x1000 || l != 64 || k != 0x77 {
		t.Fatalf("sge %#x %d %#x", a, l, k)
	}
	w := WC{ID: 1, Status: 2, Opcode: 128, VendorErr: 4, ByteLen: 5, Imm: 6, QPN: 7, SrcQP: 8, Flags: 9, PKeyIndex: 10, SLID: 11, SL: 12, DLIDBits: 13}
	wb := make([]byte, WCLen)
	w.Put(wb)
	var gw WC
	gw.Get(wb)
	if gw != w {
		t.Fatalf("wc %+v", gw)
	}
	if SendSlotBytes(1, 0) != 128 || SendSlotBytes(4, 200) != 320 || RecvSlotBytes(2) != 48 {
		t.Errorf("slot sizes %d %d %d", SendSlotBytes(1, 0), SendSlotBytes(4, 200), RecvSlotBytes(2))
	}
}

func TestRingView(t *testing.T) {
	mem := make([]byte, RingBytes(8, 64)+128)
	// Align as a mapping is.
	off := (64 - int(uintptr(unsafe.Pointer(&mem[0]))%64)) % 64
	mem = mem[off:]
	if _, ok := NewRing(mem, 6, 64); ok {
		t.Error("a ring of 6 slots")
	}
	if _, ok := NewRing(mem[:100], 8, 64); ok {
		t.Error("a ring in too little memory")
	}
	r, ok := NewRing(mem, 8, 64)
	if !ok {
		t.Fatal("ring refused")
	}
	r.Init()
	if binary.LittleEndian.Uint32(mem[OffSlots:]) != 8 || binary.LittleEndian.Uint32(mem[OffSlotSize:]) != 64 {
		t.Error("geometry not written")
	}
	r.SetProducer(9)
	if binary.LittleEndian.Uint32(mem[OffProducer:]) != 9 || r.Producer() != 9 {
		t.Error("producer")
	}
	if &r.Slot(9)[0] != &mem[RingHeaderLen+64] {
		t.Error("slot 9 is not slot 1")
	}
	r.AddEvent()
	if binary.LittleEndian.Uint32(mem[OffEvents:]) != 1 {
		t.Error("events")
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, v := range []any{&ModifyQP{QP: 1}, &CreateQP{PD: 1, Type: QPTypeRC}, &RegMR{Length: 4096}, nil} {
		msg, _ := Marshal(Header{Op: OpModifyQP, Seq: 1}, v)
		f.Add(msg)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, body, err := ParseHeader(msg)
		if err != nil {
			return
		}
		if int(h.Len) != len(body) {
			t.Fatalf("body %d, header says %d", len(body), h.Len)
		}
		for _, v := range []any{&ModifyQP{}, &CreateQP{}, &RegMR{}, &CreateAH{}, &CreateCQ{}, &Hello{}} {
			if err := Unmarshal(body, v); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestDeviceCapFlagsMatchVerbsH checks the capability flags against
// rdma-core's <infiniband/verbs.h>, where the machine has it.
func TestDeviceCapFlagsMatchVerbsH(t *testing.T) {
	b, err := os.ReadFile("/usr/include/infiniband/verbs.h")
	if err != nil {
		t.Skipf("skipping: %v (Debian's libibverbs-dev)", err)
	}
	for name, v := range map[string]int{
		"IBV_DEVICE_SYS_IMAGE_GUID":     DeviceSysImageGUID,
		"IBV_DEVICE_RC_RNR_NAK_GEN":     DeviceRCRNRNAKGen,
		"IBV_DEVICE_MEM_WINDOW":         DeviceMemWindow,
		"IBV_DEVICE_MEM_MGT_EXTENSIONS": DeviceMemMgtExt,
		"IBV_DEVICE_MEM_WINDOW_TYPE_2B": DeviceMemWindowType2B,
	} {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=\s*1\s*<<\s*(\d+),`).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: not in verbs.h", name)
			continue
		}
		if n, _ := strconv.Atoi(string(m[1])); 1<<n != v {
			t.Errorf("%s is 1 << %s in verbs.h, %#x here", name, m[1], v)
		}
	}
}
