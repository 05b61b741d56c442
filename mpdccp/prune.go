// SPDX-License-Identifier: MIT

package mpdccp

// pruneSubflows frees the subflows of an open connection that are closed
// and have nothing left to send (a removed path, a failed or timed-out
// join): a peer that keeps joining and failing must not grow the
// connection without bound.
func (c *Conn) pruneSubflows() {
	if c.state != Open {
		return
	}
	j := 0
	for _, sf := range c.subflows {
		if sf.state == sfClosed && !sf.resetOut {
			c.rtxDrop(sf)
			c.ep.unindex(sf)
			continue
		}
		c.subflows[j] = sf
		j++
	}
	if j == len(c.subflows) {
		return
	}
	clear(c.subflows[j:])
	c.subflows = c.subflows[:j]
	c.updatePaths()
}
