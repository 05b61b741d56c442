// SPDX-License-Identifier: MIT

// Package registry maps the names used in config files to the factories
// of one kind of pluggable component (congestion controllers, schedulers,
// reorderers). Implementations register themselves from init functions.
package registry

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Registry holds the factories of one kind of component; F is the
// factory's function type. It is safe for concurrent use.
type Registry[F any] struct {
	kind string // what the components are, for errors: "scheduler"

	mu sync.RWMutex
	m  map[string]F
}

// New returns an empty registry of components called kind in errors.
func New[F any](kind string) *Registry[F] {
	return &Registry[F]{kind: kind, m: map[string]F{}}
}

// Register makes f available under name. Registering a name twice is a
// programming error and panics, as does an empty name.
func (r *Registry[F]) Register(name string, f F) {
	if name == "" {
		panic(fmt.Sprintf("registry: %s with an empty name", r.kind))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[name]; dup {
		panic(fmt.Sprintf("registry: %s %q registered twice", r.kind, name))
	}
	r.m[name] = f
}

// Lookup returns the factory registered under name, or an error that
// lists the known names.
func (r *Registry[F]) Lookup(name string) (F, error) {
	r.mu.RLock()
	f, ok := r.m[name]
	r.mu.RUnlock()
	if !ok {
		return f, fmt.Errorf("unknown %s %q (have %s)", r.kind, name, strings.Join(r.Names(), ", "))
	}
	return f, nil
}

// Has reports whether name is registered.
func (r *Registry[F]) Has(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.m[name]
	return ok
}

// Names lists the registered names in order.
func (r *Registry[F]) Names() []string {
	r.mu.RLock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	return names
}
