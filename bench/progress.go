// SPDX-License-Identifier: MIT

package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// progress shows where a long benchmark is: step k of n, the peer running,
// elapsed time and an ETA from the steps' estimated durations, corrected by
// how long the finished steps really took. On a terminal it redraws one
// status line every second; otherwise it prints a line per peer.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	n     int
	est   time.Duration // all steps

	mu        sync.Mutex
	k         int
	name      string
	peer      string
	doneEst   time.Duration // estimates of the finished steps
	doneReal  time.Duration
	stepEst   time.Duration
	stepStart time.Time
	stop      chan struct{}
	wg        sync.WaitGroup
}

func newProgress(w io.Writer, n int, est time.Duration) *progress {
	p := &progress{w: w, tty: isTerminal(w), start: time.Now(), n: n, est: est, stop: make(chan struct{})}
	if p.tty {
		p.wg.Add(1)
		go p.redraw()
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// startStep begins step k (1-based) with its estimated duration.
func (p *progress) startStep(k int, name string, est time.Duration) {
	p.mu.Lock()
	p.k, p.name, p.peer, p.stepEst, p.stepStart = k, name, "", est, time.Now()
	p.mu.Unlock()
}

// startPeer notes the peer now running in the step.
func (p *progress) startPeer(peer string) {
	p.mu.Lock()
	p.peer = peer
	line := p.statusLocked()
	p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, line)
	}
}

// endStep closes the step and prints a permanent line about it.
func (p *progress) endStep(result string) {
	p.mu.Lock()
	p.doneEst += p.stepEst
	p.doneReal += time.Since(p.stepStart)
	k, n, name := p.k, p.n, p.name
	p.stepEst, p.peer = 0, ""
	p.mu.Unlock()
	p.println(fmt.Sprintf("[%d/%d %s] %s: %s", k, n, fmtDur(time.Since(p.start)), name, result))
}

// println prints a permanent line above the status line.
func (p *progress) println(s string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", s)
		return
	}
	fmt.Fprintln(p.w, s)
}

// eta is the remaining time: the estimates left, scaled by how the
// finished steps compared with theirs.
func (p *progress) etaLocked() time.Duration {
	scale := 1.0
	if p.doneEst > 0 {
		scale = float64(p.doneReal) / float64(p.doneEst)
	}
	left := p.est - p.doneEst - p.stepEst
	cur := time.Duration(float64(p.stepEst)*scale) - time.Since(p.stepStart)
	return time.Duration(float64(max(left, 0))*scale) + max(cur, 0)
}

func (p *progress) statusLocked() string {
	peer := ""
	if p.peer != "" {
		peer = ", " + p.peer
	}
	return fmt.Sprintf("[%d/%d %s%s] elapsed %s, ETA %s", p.k, p.n, p.name, peer, fmtDur(time.Since(p.start)), fmtDur(p.etaLocked()))
}

func (p *progress) redraw() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
		}
		p.mu.Lock()
		line := p.statusLocked()
		p.mu.Unlock()
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	}
}

func (p *progress) close() {
	close(p.stop)
	p.wg.Wait()
}

// fmtDur prints 1h02m03s / 4m05s / 7s.
func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%02ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm%02ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

// loadAverage returns /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
