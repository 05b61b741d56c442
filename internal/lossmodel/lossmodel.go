// SPDX-License-Identifier: MIT

// Package lossmodel is the Gilbert–Elliott bursty loss model shared by the
// path simulator (internal/netsim) and the lab's link emulator (lab/emu).
package lossmodel

import "fmt"

// GilbertElliott is a two-state loss model. Per packet the chain first
// moves (good→bad with PGoodBad, bad→good with PBadGood), then the packet
// is lost with the loss probability of the state it is in.
type GilbertElliott struct {
	PGoodBad, PBadGood float64
	LossGood, LossBad  float64
}

// Validate checks that every field is a probability.
func (g GilbertElliott) Validate() error {
	for _, v := range []float64{g.PGoodBad, g.PBadGood, g.LossGood, g.LossBad} {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("gilbert-elliott %v: not a probability", v)
		}
	}
	return nil
}

// MeanLoss is the stationary loss probability of the chain.
func (g GilbertElliott) MeanLoss() float64 {
	if g.PGoodBad+g.PBadGood == 0 {
		return g.LossGood
	}
	pBad := g.PGoodBad / (g.PGoodBad + g.PBadGood)
	return (1-pBad)*g.LossGood + pBad*g.LossBad
}

// Rand is the source of uniform [0, 1) numbers the chain draws from
// (*math/rand/v2.Rand is one).
type Rand interface{ Float64() float64 }

// Chain is the model's state for one link direction; the zero value
// starts in the good state.
type Chain struct{ bad bool }

// Bad reports whether the chain is in the bad state.
func (c *Chain) Bad() bool { return c.bad }

// Lost moves the chain for one packet and reports whether that packet is
// lost. It draws one number for the transition and, when the state's loss
// probability is not zero, one for the loss.
func (c *Chain) Lost(g *GilbertElliott, rng Rand) bool {
	if c.bad {
		if rng.Float64() < g.PBadGood {
			c.bad = false
		}
	} else if rng.Float64() < g.PGoodBad {
		c.bad = true
	}
	p := g.LossGood
	if c.bad {
		p = g.LossBad
	}
	return p > 0 && rng.Float64() < p
}
