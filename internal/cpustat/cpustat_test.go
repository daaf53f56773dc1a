package cpustat

import "testing"

func TestParse(t *testing.T) {
	b := []byte("cpu  100 5 50 800 10 1 2 32 7 0\ncpu0 50 2 25 400 5 0 1 16 3 0\nintr 1\n")
	got, err := parse(b)
	if err != nil || got.Total != 1000 || got.Steal != 32 {
		t.Fatalf("parse = %+v, %v; want total 1000, steal 32", got, err)
	}
	if s := StealShare(Times{Total: 1000, Steal: 32}, Times{Total: 1200, Steal: 82}); s != 0.25 {
		t.Errorf("share %v, want 0.25", s)
	}
	for _, bad := range []string{"", "cpu 1 2 3\n", "cpu a b c d e f g h\n"} {
		if _, err := parse([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestRead(t *testing.T) {
	a, err := Read()
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	if a.Total == 0 || a.Steal > a.Total {
		t.Fatalf("times %+v", a)
	}
}

func TestProcessCPU(t *testing.T) {
	a, err := ProcessCPU()
	if err != nil {
		t.Skipf("no process cpu time: %v", err)
	}
	x := 0
	for i := 0; i < 20_000_000; i++ {
		x += i ^ x
	}
	b, _ := ProcessCPU()
	if b <= a || x == 1 {
		t.Fatalf("cpu time %v then %v", a, b)
	}
}
