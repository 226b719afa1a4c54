package reliability

import (
	"crypto/sha256"
	"encoding/binary"
)

// Chain is a hash chain over the frames of one direction of one stream:
// each link is sha256(previous link, frame length, frame). Two chains are
// equal only if they saw the same frames, byte for byte, in the same order.
// A sender keeps every link (Keep), so that a receiver that saw only the
// first n frames, because the stream was cut, compares with link n.
type Chain struct {
	link  [32]byte
	n     int
	links [][32]byte // links[i] is the link after i frames, when kept
}

// NewChain returns an empty chain; keep says whether every link is kept.
func NewChain(keep bool) *Chain {
	c := &Chain{}
	if keep {
		c.links = [][32]byte{c.link}
	}
	return c
}

// Add extends the chain with one frame.
func (c *Chain) Add(frame []byte) {
	h := sha256.New()
	h.Write(c.link[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(frame)))
	h.Write(n[:])
	h.Write(frame)
	h.Sum(c.link[:0])
	c.n++
	if c.links != nil {
		c.links = append(c.links, c.link)
	}
}

// Len is the number of frames in the chain.
func (c *Chain) Len() int { return c.n }

// linkAtIndex is the link after the first n frames; ok is false when n is past
// the end or the links were not kept.
func (c *Chain) linkAtIndex(n int) (link [32]byte, ok bool) {
	if n < 0 || n >= len(c.links) {
		return link, false
	}
	return c.links[n], true
}

// IsPrefixOf reports whether the frames received (c) are exactly the first
// c.Len() frames sent (sent, which keeps its links).
func (c *Chain) IsPrefixOf(sent *Chain) bool {
	link, ok := sent.linkAtIndex(c.n)
	return ok && link == c.link
}
