package track

import (
	"slices"
	"sync"

	"google.golang.org/grpc/mem"
)

// A control plane sends the same bytes to many streams: a full push after
// a config change goes to every proxy, each on a connection of its own. The
// keeper keeps what a NACK of each of those pushes needs once for all of
// them: a push's kept bytes (its changed resources copied, or the push by
// reference) are a sharedPush in the tracker's store, found again by the
// content hashes of the resources kept, and reference-counted by the
// streams holding them. --nack-keep-bytes counts distinct bytes: a fan-out
// of one 200 KB push to a thousand streams is kept as 200 KB, and a view of
// its resources per stream, not 200 MB.

// sharedPush is what one push kept, shared by every stream whose push kept
// the same resources, in the same order.
type sharedPush struct {
	key shareKey
	// hashes and names are the kept resources', in order: what a push is
	// checked against before it shares them (the key is a hash of them).
	hashes []uint64
	names  []string
	data   mem.BufferSlice
	// bodies are views of the kept resources' bodies in data (or in the
	// decoder's copies of those that straddled its buffers), in order, for
	// an Accepted's views; nil unless the keeper accepts.
	bodies [][]byte
	// views are the Accepted's views of the kept resources, in order, when
	// the push that made it handed over those alone (partial): every
	// stream whose push does the same shares them, read-only.
	views []AcceptedResource
	size  int64 // counted against the bound once, while any stream holds it
	refs  int32 // the streams' holders; guarded by shard.mu
	shard *shareShard
}

// shareKey finds a sharedPush: a hash of the kept resources' content
// hashes and names in order, and what shapes the kept bytes.
type shareKey struct {
	typeURL        string
	sum            uint64
	n              int
	whole          int64
	compact, delta bool
}

// shareShards spreads the store over locks, so that streams pushed at
// once seldom meet on one: a lock is held for a lookup, an insertion or a
// release, never across streams' work.
const shareShards = 64

type shareShard struct {
	mu sync.Mutex
	m  map[shareKey]*sharedPush
}

type shareStore struct{ shards [shareShards]shareShard }

func (s *shareStore) shard(key shareKey) *shareShard { return &s.shards[key.sum%shareShards] }

// find returns the sharedPush kept under key with these hashes and names,
// taking a reference to it; nil when there is none.
func (s *shareStore) find(key shareKey, hashes []uint64, names []string) *sharedPush {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.m[key]
	if p == nil || !slices.Equal(p.hashes, hashes) || !slices.Equal(p.names, names) {
		return nil
	}
	p.refs++
	return p
}

// add keeps p, held once, for the pushes that keep the same resources
// next. A twin added meanwhile stays the one found.
func (s *shareStore) add(p *sharedPush) {
	sh := s.shard(p.key)
	p.shard, p.refs = sh, 1
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = map[shareKey]*sharedPush{}
	}
	if sh.m[p.key] == nil {
		sh.m[p.key] = p
	}
}

// AcceptedResource is one resource of an acknowledged push.
type AcceptedResource struct {
	Name    string
	TypeURL string // its Any's type URL
	// Body is the serialized resource, a view valid until
	// the reader's Lease.Release; nil when Unchanged and the push was kept compact
	// (only what it added or changed).
	Body []byte
	// Unchanged is set when the push carried the resource byte for byte as
	// the client had acknowledged it before, or as a heartbeat: either way
	// the client keeps what it had. Never set in a Partial Accepted.
	Unchanged bool
	// Hash is the resource's content hash as the decoder computed it
	// (codec.Resource.Hash): the same bytes, the same hash, whichever
	// stream they were sent on.
	Hash uint64
}
