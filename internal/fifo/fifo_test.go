package fifo

import "testing"

// TestQueueOrder pushes and pops across the ring's wrap and its growth:
// values come out in the order they went in.
func TestQueueOrder(t *testing.T) {
	var q Queue[int]
	next, want := 0, 0
	for round := 0; round < 50; round++ {
		for i := 0; i < round%7+round/5; i++ {
			q.Push(next)
			next++
		}
		for i := 0; i < round%5 && q.Len() > 0; i++ {
			if q.Peek() != want {
				t.Fatalf("peek %d, want %d", q.Peek(), want)
			}
			if v := q.Pop(); v != want {
				t.Fatalf("pop %d, want %d", v, want)
			}
			want++
		}
		if q.Len() != next-want {
			t.Fatalf("len %d, want %d", q.Len(), next-want)
		}
	}
	for q.Len() > 0 {
		if v := q.Pop(); v != want {
			t.Fatalf("pop %d, want %d", v, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d values, pushed %d", want, next)
	}
}
