// SPDX-License-Identifier: MIT

package emu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/internal/ptimer"
)

// Dir names a direction of a Link: AB carries frames arriving on device A
// out of device B.
type Dir int

const (
	AB Dir = iota
	BA
)

func (d Dir) String() string {
	if d == AB {
		return "ab"
	}
	return "ba"
}

// Options are a Link's non-impairment settings.
type Options struct {
	Start    mono.Time     // time zero of traces and logs; 0 = now
	Seed     uint64        // randomness; direction BA uses Seed+1
	BinWidth time.Duration // throughput bins; default 100 ms
	Log      [2]io.Writer  // optional per-packet log per direction
}

// Link bridges two devices of one namespace at layer 2 through two Pipes.
type Link struct {
	dirs   [2]*direction
	socks  [2]*os.File
	wg     sync.WaitGroup
	closed chan struct{}
	errMu  sync.Mutex
	err    error
}

type direction struct {
	mu          sync.Mutex
	pipe        *Pipe
	in          *os.File
	out         *os.File
	timer       *ptimer.Timer
	armed       mono.Time
	log         *bufio.Writer
	lbuf        []byte
	sendErrors  uint64
	socketDrops uint64
}

// openPacketSocket opens a non-blocking AF_PACKET socket bound to dev that
// does not see its own transmissions. Must run inside the namespace.
func openPacketSocket(dev string) (*os.File, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("emu: %s: %w", dev, err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("emu: %s: socket: %w", dev, err)
	}
	fail := func(what string, err error) (*os.File, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("emu: %s: %s: %w", dev, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	// Deep socket buffers: the emulator's queue, not the socket, must be
	// the bottleneck.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return os.NewFile(uintptr(fd), "packet:"+dev), nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Start bridges devA and devB inside ns (a namespace with no addresses and
// forwarding off) with the given per-direction configurations.
func Start(ns *netns.NS, devA, devB string, ab, ba Config, opt Options) (*Link, error) {
	if err := ab.Validate(); err != nil {
		return nil, fmt.Errorf("emu %s->%s: %w", devA, devB, err)
	}
	if err := ba.Validate(); err != nil {
		return nil, fmt.Errorf("emu %s->%s: %w", devB, devA, err)
	}
	l := &Link{closed: make(chan struct{})}
	err := ns.Do(func() error {
		for i, dev := range []string{devA, devB} {
			s, err := openPacketSocket(dev)
			if err != nil {
				return err
			}
			l.socks[i] = s
		}
		return nil
	})
	if err != nil {
		l.closeSockets()
		return nil, err
	}
	if opt.Start == 0 {
		opt.Start = mono.Now()
	}
	cfgs := [2]Config{ab, ba}
	for d := range l.dirs {
		t, err := ptimer.New()
		if err != nil {
			l.Close()
			return nil, err
		}
		p := NewPipe(cfgs[d], opt.Start, opt.Seed+uint64(d))
		if opt.BinWidth > 0 {
			p.BinWidth = opt.BinWidth
		}
		dir := &direction{pipe: p, in: l.socks[d], out: l.socks[1-d], timer: t, armed: mono.Never}
		if w := opt.Log[d]; w != nil {
			dir.log = bufio.NewWriterSize(w, 64<<10)
			p.OnEvent = dir.logEvent
		}
		l.dirs[d] = dir
	}
	for _, d := range l.dirs {
		l.wg.Add(2)
		go l.readLoop(d)
		go l.sendLoop(d)
	}
	return l, nil
}

func (l *Link) closeSockets() {
	for _, s := range l.socks {
		if s != nil {
			s.Close()
		}
	}
}

func (l *Link) fail(err error) {
	l.errMu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.errMu.Unlock()
}

// Err returns the first I/O error that stopped the link, if any.
func (l *Link) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

func (l *Link) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// readLoop takes frames off the ingress device and queues them.
func (l *Link) readLoop(d *direction) {
	defer l.wg.Done()
	for {
		d.mu.Lock()
		f := d.pipe.GetFrame()
		d.mu.Unlock()
		n, err := d.in.Read(f.Buf[:MaxFrame])
		now := mono.Now()
		if err != nil {
			if !l.isClosed() && !errors.Is(err, os.ErrClosed) {
				l.fail(fmt.Errorf("emu: read %s: %w", d.in.Name(), err))
			}
			return
		}
		f.Buf = f.Buf[:n]
		d.mu.Lock()
		d.pipe.Enqueue(now, f)
		if dl := d.pipe.NextDeadline(); dl < d.armed {
			d.arm(dl)
		}
		d.mu.Unlock()
	}
}

// arm sets the timer; d.mu must be held.
func (d *direction) arm(dl mono.Time) {
	d.armed = dl
	_ = d.timer.Reset(dl)
}

// sendLoop wakes at each deadline and sends the frames that are due.
func (l *Link) sendLoop(d *direction) {
	defer l.wg.Done()
	var batch []*Frame
	for {
		if _, err := d.timer.Wait(); err != nil {
			return
		}
		now := mono.Now()
		d.mu.Lock()
		d.armed = mono.Never
		d.pipe.Advance(now)
		for f := d.pipe.Pop(now); f != nil; f = d.pipe.Pop(now) {
			batch = append(batch, f)
		}
		d.mu.Unlock()
		for _, f := range batch {
			if _, err := d.out.Write(f.Buf); err != nil {
				if l.isClosed() || errors.Is(err, os.ErrClosed) {
					return
				}
				// A device that is down refuses frames: count, keep going.
				d.mu.Lock()
				d.sendErrors++
				d.mu.Unlock()
			}
		}
		d.mu.Lock()
		for i, f := range batch {
			d.pipe.PutFrame(f)
			batch[i] = nil
		}
		batch = batch[:0]
		if dl := d.pipe.NextDeadline(); dl < d.armed {
			d.arm(dl)
		}
		d.mu.Unlock()
	}
}

func (d *direction) logEvent(e Event) {
	b := d.lbuf[:0]
	b = strconv.AppendInt(b, int64(e.At/mono.Time(time.Millisecond)), 10)
	b = append(b, ' ', e.Kind, ' ')
	b = strconv.AppendInt(b, int64(e.Size), 10)
	if e.Kind == '-' {
		b = append(b, ' ')
		b = strconv.AppendInt(b, e.Delay.Milliseconds(), 10)
	}
	b = append(b, '\n')
	d.log.Write(b)
	d.lbuf = b
}

// Update changes one direction's configuration at runtime.
func (l *Link) Update(dir Dir, fn func(*Config)) error {
	d := l.dirs[dir]
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg := d.pipe.Config()
	fn(&cfg)
	if err := cfg.Validate(); err != nil {
		return err
	}
	now := mono.Now()
	d.pipe.Advance(now)
	d.pipe.SetConfig(cfg, now)
	// Kick the sender: the new config may move or drop frames now.
	d.arm(now)
	return nil
}

// UpdateBoth applies fn to both directions.
func (l *Link) UpdateBoth(fn func(*Config)) error {
	return errors.Join(l.Update(AB, fn), l.Update(BA, fn))
}

// Config returns a direction's current configuration.
func (l *Link) Config(dir Dir) Config {
	d := l.dirs[dir]
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pipe.Config()
}

// Stats returns a direction's counters.
func (l *Link) Stats(dir Dir) Stats {
	d := l.dirs[dir]
	d.mu.Lock()
	defer d.mu.Unlock()
	// PACKET_STATISTICS resets on read, so accumulate.
	if rc, err := d.in.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				d.socketDrops += uint64(st.Drops)
			}
		})
	}
	s := d.pipe.Stats
	s.SocketDrops, s.SendErrors = d.socketDrops, d.sendErrors
	return s
}

// Bins returns a copy of a direction's throughput bins.
func (l *Link) Bins(dir Dir) []Bin {
	d := l.dirs[dir]
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Bin(nil), d.pipe.Bins...)
}

// TimerLateness is the emulator's own timer error per direction.
func (l *Link) TimerLateness(dir Dir) *ptimer.Histogram { return &l.dirs[dir].timer.Lateness }

// Close stops the link; frames still queued are dropped.
func (l *Link) Close() error {
	select {
	case <-l.closed:
		return nil
	default:
	}
	close(l.closed)
	l.closeSockets()
	for _, d := range l.dirs {
		if d != nil {
			d.timer.Close()
		}
	}
	l.wg.Wait()
	for _, d := range l.dirs {
		if d != nil && d.log != nil {
			d.mu.Lock()
			d.log.Flush()
			d.mu.Unlock()
		}
	}
	return l.Err()
}
