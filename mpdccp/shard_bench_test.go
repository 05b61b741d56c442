// SPDX-License-Identifier: MIT

package mpdccp

import (
	"crypto/aes"
	"crypto/cipher"
	"runtime"
	"testing"
)

// BenchmarkEnginePacketSecureParallel runs independent secure engine
// pairs (a CPE's client engine and a concentrator shard's engine, in
// memory) on GOMAXPROCS goroutines at once: what sharding a concentrator
// relies on, engines that share nothing. Run with -cpu 1,2: ns/op is per
// packet over all goroutines, so it halves when two cores are free (on
// a busy machine it shows how much of a second core this process got).
func BenchmarkEnginePacketSecureParallel(b *testing.B) {
	n := runtime.GOMAXPROCS(0)
	pipes := make(chan *statePipe, n)
	pkt := innerPkt("10.99.0.2", 1200, 7)
	for range n {
		p := securePipe(b, "aes-256-gcm")
		for i := 0; i < 5000; i++ {
			p.sendOne(pkt)
		}
		pipes <- p
	}
	var start uint64
	all := make([]*statePipe, 0, n)
	for range n {
		p := <-pipes
		start += p.deliveredByServer()
		all = append(all, p)
	}
	for _, p := range all {
		pipes <- p
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := <-pipes
		for pb.Next() {
			p.sendOne(pkt)
		}
	})
	b.StopTimer()
	var got uint64
	for _, p := range all {
		got += p.deliveredByServer()
	}
	if got-start < uint64(b.N)*9/10 {
		b.Fatalf("delivered %d of %d", got-start, b.N)
	}
}

// BenchmarkAEADSealParallel is the reference for the one above: AES-GCM
// seals of 1,200 bytes with nothing shared between goroutines, so its
// -cpu 1 to 2 ratio is what the machine's second core gives at the
// moment, whatever the engine does.
func BenchmarkAEADSealParallel(b *testing.B) {
	b.SetBytes(1200)
	b.RunParallel(func(pb *testing.PB) {
		blk, err := aes.NewCipher(make([]byte, 32))
		if err != nil {
			panic(err)
		}
		g, err := cipher.NewGCM(blk)
		if err != nil {
			panic(err)
		}
		buf := make([]byte, 1200, 1200+g.Overhead())
		nonce := make([]byte, g.NonceSize())
		for pb.Next() {
			nonce[0]++
			g.Seal(buf[:0], nonce, buf, nil)
		}
	})
}
