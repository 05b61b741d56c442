// SPDX-License-Identifier: MIT

package ring

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"weak"
)

// Random pushes and pops agree with a slice used as a queue, across growth
// and wrap-around.
func TestAgainstSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r Ring[int]
	var model []int
	next := 0
	for step := 0; step < 100000; step++ {
		if rng.IntN(100) < 55 {
			r.Push(next)
			model = append(model, next)
			next++
		} else {
			v, ok := r.Pop()
			if ok != (len(model) > 0) {
				t.Fatalf("step %d: Pop ok %v with %d queued", step, ok, len(model))
			}
			if ok {
				if v != model[0] {
					t.Fatalf("step %d: popped %d, want %d", step, v, model[0])
				}
				model = model[1:]
			}
		}
		if r.Len() != len(model) {
			t.Fatalf("step %d: Len %d, want %d", step, r.Len(), len(model))
		}
		if len(model) > 0 {
			i := rng.IntN(len(model))
			if *r.At(i) != model[i] || *r.Front() != model[0] || *r.Back() != model[len(model)-1] {
				t.Fatalf("step %d: At/Front/Back disagree", step)
			}
		}
	}
	if r.Cap()&(r.Cap()-1) != 0 {
		t.Errorf("capacity %d is not a power of two", r.Cap())
	}
}

// Growing while the contents wrap around keeps their order.
func TestGrowWrapped(t *testing.T) {
	r := New[int](8)
	for i := 0; i < 6; i++ {
		r.Push(i)
	}
	for i := 0; i < 4; i++ {
		r.Pop()
	}
	for i := 6; i < 20; i++ { // wraps, then grows twice
		r.Push(i)
	}
	for want := 4; want < 20; want++ {
		if v, ok := r.Pop(); !ok || v != want {
			t.Fatalf("popped %d %v, want %d", v, ok, want)
		}
	}
	if _, ok := r.Pop(); ok {
		t.Fatal("Pop on empty ring")
	}
}

func TestAtOutOfRangePanics(t *testing.T) {
	var r Ring[int]
	r.Push(1)
	for _, i := range []int{-1, 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("At(%d) did not panic", i)
				}
			}()
			r.At(i)
		}()
	}
}

// Popped and cleared slots drop their pointers, so queued buffers can be
// collected.
func TestPopReleasesPointers(t *testing.T) {
	var r Ring[*[1 << 16]byte]
	p := new([1 << 16]byte)
	w := weak.Make(p)
	r.Push(p)
	r.Push(new([1 << 16]byte))
	p = nil
	r.Pop()
	r.Clear()
	runtime.GC()
	if w.Value() != nil {
		t.Error("the ring still holds a popped element")
	}
	if r.Len() != 0 {
		t.Errorf("Len %d after Clear", r.Len())
	}
}

// Once grown to its working size, the ring does not allocate.
func TestSteadyStateDoesNotAllocate(t *testing.T) {
	r := New[[]byte](64)
	buf := make([]byte, 10)
	if a := testing.AllocsPerRun(1000, func() {
		for i := 0; i < 50; i++ {
			r.Push(buf)
		}
		for i := 0; i < 50; i++ {
			r.Pop()
		}
	}); a != 0 {
		t.Errorf("%v allocations per run", a)
	}
}

func BenchmarkPushPop(b *testing.B) {
	r := New[int](1024)
	for i := 0; i < 512; i++ {
		r.Push(i)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Push(i)
		r.Pop()
	}
}
