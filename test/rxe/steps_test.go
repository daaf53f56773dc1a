package rxe

import "testing"

func TestSection(t *testing.T) {
	out := "boot\n== begin a\nx\ny\n== end a 3\n== begin b\nz\n"
	if s, code, ok := Section(out, "a"); s != "x\ny\n" || code != 3 || !ok {
		t.Errorf("a: %q %d %v", s, code, ok)
	}
	if s, _, ok := Section(out, "b"); s != "z\n" || ok {
		t.Errorf("b, never ended: %q %v", s, ok)
	}
	if _, _, ok := Section(out, "c"); ok {
		t.Error("c found")
	}
}
