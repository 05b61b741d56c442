// SPDX-License-Identifier: MIT

// Package ring is a FIFO queue on a circular buffer, for the queues of the
// data path and the simulators.
package ring

// Ring is a FIFO queue. Its buffer doubles when full and never shrinks,
// so once a ring has grown to its working size Push and Pop do not
// allocate. The zero value is an empty ring. It is not safe for
// concurrent use.
type Ring[T any] struct {
	buf  []T // len is 0 or a power of two
	head int // index of the front element in buf
	n    int
}

// New returns a ring with room for capacity elements before it grows.
func New[T any](capacity int) *Ring[T] {
	r := &Ring[T]{}
	r.Grow(capacity)
	return r
}

// Len is the number of queued elements.
func (r *Ring[T]) Len() int { return r.n }

// Cap is how many elements fit before the ring grows.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Grow makes room for n more elements without further allocation.
func (r *Ring[T]) Grow(n int) {
	if r.n+n <= len(r.buf) {
		return
	}
	size := max(len(r.buf), 8)
	for size < r.n+n {
		size *= 2
	}
	buf := make([]T, size)
	if r.n > 0 {
		// Copy the two halves so the front lands at index 0.
		k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
		copy(buf[k:], r.buf[:r.n-k])
	}
	r.buf, r.head = buf, 0
}

// Push appends v at the back.
func (r *Ring[T]) Push(v T) {
	if r.n == len(r.buf) {
		r.Grow(1)
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// Pop removes and returns the front element; ok is false when empty. The
// slot is cleared so that the ring keeps no pointer to it.
func (r *Ring[T]) Pop() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	var zero T
	v, r.buf[r.head] = r.buf[r.head], zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v, true
}

// Front is the front element; it panics when the ring is empty.
func (r *Ring[T]) Front() *T { return r.At(0) }

// Back is the last element pushed; it panics when the ring is empty.
func (r *Ring[T]) Back() *T { return r.At(r.n - 1) }

// At is the i-th element from the front.
func (r *Ring[T]) At(i int) *T {
	if i < 0 || i >= r.n {
		panic("ring: index out of range")
	}
	return &r.buf[(r.head+i)&(len(r.buf)-1)]
}

// Clear empties the ring, keeping its buffer.
func (r *Ring[T]) Clear() {
	var zero T
	for i := 0; i < r.n; i++ {
		r.buf[(r.head+i)&(len(r.buf)-1)] = zero
	}
	r.head, r.n = 0, 0
}
