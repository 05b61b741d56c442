// SPDX-License-Identifier: MIT

package registry

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

type factory func(int) string

func TestRegistry(t *testing.T) {
	r := New[factory]("widget")
	r.Register("b", func(n int) string { return strings.Repeat("b", n) })
	r.Register("a", func(n int) string { return strings.Repeat("a", n) })
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names() = %v", got)
	}
	f, err := r.Lookup("b")
	if err != nil || f(3) != "bbb" {
		t.Fatalf("Lookup(b) = %v", err)
	}
	if !r.Has("a") || r.Has("c") {
		t.Error("Has")
	}
	_, err = r.Lookup("c")
	if err == nil || err.Error() != `unknown widget "c" (have a, b)` {
		t.Errorf("Lookup(c) error %v", err)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	r := New[factory]("widget")
	r.Register("a", nil)
	for _, name := range []string{"a", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", name)
				}
			}()
			r.Register(name, nil)
		}()
	}
}

// Lookups run from many goroutines (connections, tests) while a late
// registration happens; run with -race.
func TestConcurrent(t *testing.T) {
	r := New[factory]("widget")
	r.Register("a", func(int) string { return "a" })
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if _, err := r.Lookup("a"); err != nil {
					t.Error(err)
					return
				}
				r.Names()
			}
		}()
	}
	r.Register("b", func(int) string { return "b" })
	wg.Wait()
}
