// SPDX-License-Identifier: MIT

package ccid

import "github.com/mptun/mptun/internal/mono"

// Compacter is implemented by controllers whose per-packet history can
// shrink. The engine calls Compact when a subflow has idled for a while,
// so that an idle connection holds a few records instead of its largest
// window's; the history grows back on demand.
type Compacter interface {
	Compact(now mono.Time)
}

// Compact shrinks the sent-packet history to what is still kept.
func (b *BBR) Compact(now mono.Time) { b.t.compact(now) }

// Compact shrinks the sent-packet history to what is still kept.
func (c *CCID2) Compact(now mono.Time) { c.t.compact(now) }

// Compact shrinks the sent-packet history to what is still kept.
func (n *None) Compact(now mono.Time) { n.t.compact(now) }
