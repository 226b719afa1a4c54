// Package weakintern keeps one of equal values for all who hold one, and lets it go once none does.
package weakintern

import (
	"runtime"
	"slices"
	"sync"
	"weak"
)

// Store holds values by a sum of their content, weakly: a value no one
// holds any more is collected, and its entry with it. It is sharded by
// sum, so that callers storing at once seldom meet on a lock.
type Store[T any] struct {
	shards [64]shard[T]
}

type shard[T any] struct {
	mu sync.Mutex
	m  map[uint64][]weak.Pointer[T]
}

func (s *Store[T]) shard(sum uint64) *shard[T] { return &s.shards[sum%uint64(len(s.shards))] }

// Get returns the stored value under sum that same reports equal to the
// caller's, or stores the one made by make and returns it. The value
// returned must not be written: others may hold it.
func (s *Store[T]) Get(sum uint64, same func(*T) bool, make func() *T) *T {
	sh := s.shard(sum)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, w := range sh.m[sum] {
		if v := w.Value(); v != nil && same(v) {
			return v
		}
	}
	v := make()
	if sh.m == nil {
		sh.m = map[uint64][]weak.Pointer[T]{}
	}
	sh.m[sum] = append(sh.m[sum], weak.Make(v))
	runtime.AddCleanup(v, s.forget, sum)
	return v
}

// forget drops the entries of collected values under sum.
func (s *Store[T]) forget(sum uint64) {
	sh := s.shard(sum)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	live := slices.DeleteFunc(sh.m[sum], func(w weak.Pointer[T]) bool { return w.Value() == nil })
	if len(live) == 0 {
		delete(sh.m, sum)
	} else {
		sh.m[sum] = live
	}
}

// Len returns the number of entries the store holds, collected values'
// included until their cleanup has run.
func (s *Store[T]) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, ws := range sh.m {
			n += len(ws)
		}
		sh.mu.Unlock()
	}
	return n
}

// Holds reports whether the store has an entry under sum, a collected
// value's included until its cleanup has run.
func (s *Store[T]) Holds(sum uint64) bool {
	sh := s.shard(sum)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.m[sum]) > 0
}
