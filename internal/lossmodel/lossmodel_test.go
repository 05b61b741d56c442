// SPDX-License-Identifier: MIT

package lossmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// run draws n packets and returns the loss rate and the mean length of
// runs of consecutive losses.
func run(g GilbertElliott, n int, seed uint64) (rate, meanBurst float64) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var c Chain
	lost, bursts, inBurst := 0, 0, false
	for i := 0; i < n; i++ {
		l := c.Lost(&g, rng)
		if l {
			lost++
			if !inBurst {
				bursts++
			}
		}
		inBurst = l
	}
	if bursts == 0 {
		return 0, 0
	}
	return float64(lost) / float64(n), float64(lost) / float64(bursts)
}

// The long-run loss rate is the chain's stationary mean, and losses come
// in bursts of about 1/PBadGood packets when the bad state loses all.
func TestMeanAndBursts(t *testing.T) {
	for _, g := range []GilbertElliott{
		{PGoodBad: 0.01, PBadGood: 0.25, LossGood: 0, LossBad: 1},
		{PGoodBad: 0.02, PBadGood: 0.1, LossGood: 0.001, LossBad: 0.5},
		{PGoodBad: 0, PBadGood: 0, LossGood: 0.03},
	} {
		rate, burst := run(g, 1_000_000, 7)
		want := g.MeanLoss()
		if math.Abs(rate-want) > 0.1*want {
			t.Errorf("%+v: loss rate %.4f, stationary %.4f", g, rate, want)
		}
		if g.LossBad == 1 && g.LossGood == 0 && math.Abs(burst-1/g.PBadGood) > 0.1/g.PBadGood {
			t.Errorf("%+v: mean burst %.2f, want %.2f", g, burst, 1/g.PBadGood)
		}
		if g.PGoodBad == 0 && burst > 1.1 { // Bernoulli: bursts of about 1
			t.Errorf("%+v: mean burst %.2f without a bad state", g, burst)
		}
	}
}

// Same seed, same losses: the lab and the simulator are reproducible.
func TestDeterministic(t *testing.T) {
	g := GilbertElliott{PGoodBad: 0.05, PBadGood: 0.3, LossBad: 0.7}
	a, _ := run(g, 10000, 3)
	b, _ := run(g, 10000, 3)
	if a != b {
		t.Errorf("%v != %v", a, b)
	}
}

func TestValidate(t *testing.T) {
	if err := (GilbertElliott{PGoodBad: 0.1, PBadGood: 0.5, LossBad: 1}).Validate(); err != nil {
		t.Error(err)
	}
	for _, g := range []GilbertElliott{{PGoodBad: -0.1}, {PBadGood: 1.5}, {LossGood: math.NaN()}, {LossBad: 2}} {
		if g.Validate() == nil {
			t.Errorf("%+v accepted", g)
		}
	}
}

func TestMeanLoss(t *testing.T) {
	g := GilbertElliott{PGoodBad: 0.1, PBadGood: 0.4, LossGood: 0.01, LossBad: 0.5}
	// π_bad = 0.1/0.5 = 0.2: 0.8×0.01 + 0.2×0.5 = 0.108
	if m := g.MeanLoss(); math.Abs(m-0.108) > 1e-12 {
		t.Errorf("MeanLoss %v", m)
	}
}

func BenchmarkLost(b *testing.B) {
	g := GilbertElliott{PGoodBad: 0.01, PBadGood: 0.3, LossBad: 1}
	rng := rand.New(rand.NewPCG(1, 2))
	var c Chain
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Lost(&g, rng)
	}
}
