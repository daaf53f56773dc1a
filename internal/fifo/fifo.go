// Package fifo is a growable ring buffer: a first-in first-out queue
// that reuses its memory.
package fifo

// Queue is a first-in first-out queue. The zero value is an empty queue.
type Queue[T any] struct {
	buf        []T
	head, size int
}

// Len returns the number of values in q.
func (q *Queue[T]) Len() int { return q.size }

// Push appends v to q, growing it when it is full.
func (q *Queue[T]) Push(v T) {
	if q.size == len(q.buf) {
		n := 2 * len(q.buf)
		if n == 0 {
			n = 16
		}
		nb := make([]T, n)
		for i := 0; i < q.size; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = v
	q.size++
}

// Peek returns the oldest value in q, which must not be empty.
func (q *Queue[T]) Peek() T { return q.buf[q.head] }

// Pop removes and returns the oldest value in q, which must not be
// empty.
func (q *Queue[T]) Pop() T {
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return v
}
