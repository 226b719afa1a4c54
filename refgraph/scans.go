package refgraph

// Scans are what resources were found to refer to, by content, for the
// graphs of every stream to share: a control plane sends the same bytes to
// many proxies (a full push after a config change goes to each), and a
// resource is then scanned once, not once per stream. What a scan finds
// is immutable (interned names and slices the graphs only read), so graphs
// share it as is. It is bounded: it holds the scans of at most
// 2×MaxScans resources, the older half let go when the newer fills. Not
// safe for concurrent use: the graphs that share it are used by one
// goroutine at a time.
type Scans struct {
	cur, old map[scanKey]*scanned
	// hits and misses count the lookups, for tests and benchmarks.
	hits, misses uint64
}

// MaxScans is how many resources' scans each half of a Scans holds.
const MaxScans = 16 << 10

// scanKey is a resource's content: its type, its body's hash and size. A
// hit is one under the same name too (a scan of a cluster records it),
// which comparing the name's bytes tells without interning it: a fan-out
// to 1,000 proxies looked each of its names up 1,000 times.
type scanKey struct {
	typeURL string
	hash    uint64
	size    int
}

// NewScans returns an empty Scans.
func NewScans() *Scans { return &Scans{cur: map[scanKey]*scanned{}} }

// scan fills s with the resource called resName and what body refers to:
// a copy of the scan of the same bytes under the same name if there is
// one.
func (c *Scans) scan(s *scanned, typeURL, resName string, body []byte, hash uint64) {
	k := scanKey{typeURL: typeURL, hash: hash, size: len(body)}
	if hit := c.cur[k]; hit != nil && hit.name.Value() == resName {
		c.hits++
		*s = *hit
		return
	}
	if hit := c.old[k]; hit != nil && hit.name.Value() == resName {
		c.hits++
		*s = *hit
		c.put(k, hit)
		return
	}
	c.misses++
	s.name = unique1(resName)
	s.scan(typeURL, body)
	x := *s
	c.put(k, &x)
}

func (c *Scans) put(k scanKey, s *scanned) {
	if len(c.cur) >= MaxScans {
		c.old, c.cur = c.cur, make(map[scanKey]*scanned, len(c.cur))
	}
	c.cur[k] = s
}

// Stats returns how many lookups found a scan and how many scanned.
func (c *Scans) Stats() (hits, misses uint64) { return c.hits, c.misses }
