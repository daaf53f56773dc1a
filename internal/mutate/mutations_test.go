package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestMutationsApply: every mutation's text to replace is in its file
// exactly once, so that none goes stale unnoticed when the code it breaks
// is rewritten (running them takes minutes; this takes none).
func TestMutationsApply(t *testing.T) {
	names := map[string]bool{}
	for _, m := range mutations {
		if names[m.name] {
			t.Errorf("mutation %s listed twice", m.name)
		}
		names[m.name] = true
		applied := map[string][]byte{}
		for _, e := range m.edits {
			b, ok := applied[e.file]
			if !ok {
				var err error
				if b, err = os.ReadFile(filepath.Join("..", "..", e.file)); err != nil {
					t.Errorf("%s: %v", m.name, err)
					continue
				}
			}
			if n := bytes.Count(b, []byte(e.old)); n != 1 {
				t.Errorf("%s: %s holds the text to replace %d times, not once: %q", m.name, e.file, n, e.old)
				continue
			}
			applied[e.file] = bytes.Replace(b, []byte(e.old), []byte(e.new), 1)
		}
	}
}
