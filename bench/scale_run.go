// SPDX-License-Identifier: MIT

package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/mpdccp/noise"
)

// The scale bench's addresses. The CPEs' outer addresses are all of
// 10.92.0.0/16, local to the client namespace (an AnyIP route), which
// routes them to the concentrator over one veth; the concentrator reaches
// them through the client namespace as a gateway, so its neighbour table
// holds one entry, not one per CPE. Inner addresses: CPE i is
// 10.128.0.0+i+1 (its [[peer]] allowed_ips), and bulk flows go to a sink
// the concentrator's namespace blackholes after the TUN counted them.
var (
	scaleSrv      = netip.MustParseAddr("10.91.0.1")
	scaleGW       = netip.MustParseAddr("10.91.0.2")
	scaleCPENet   = netip.MustParsePrefix("10.92.0.0/16")
	scaleInnerNet = netip.MustParsePrefix("10.128.0.0/16")
	scaleSrvInner = netip.MustParseAddr("10.127.0.1")
	scaleSink     = netip.MustParseAddr("10.126.0.1")
)

const (
	scaleTUN        = "mpts0"
	scaleMaxClients = 60000
)

// nthAddr is the address n after the start of p.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// scaleBed is one run's namespaces, concentrator and CPEs.
type scaleBed struct {
	o        ScaleOptions
	srv, cli *netns.NS
	dir      string
	sock     string
	daemon   *proc
	log      *syncBuffer
	cpes     []*cpe
	workers  []*cpeWorker
	shards   int // the concentrator's owners (its GOMAXPROCS)
}

func scaleRun(ctx context.Context, tools Tools, o ScaleOptions, gomaxprocs int) (r ScaleRun, err error) {
	r.GOMAXPROCS = gomaxprocs
	if o.Clients > scaleMaxClients {
		return r, fmt.Errorf("at most %d clients", scaleMaxClients)
	}
	b := &scaleBed{o: o, shards: gomaxprocs}
	defer b.close()
	if err := b.network(ctx); err != nil {
		return r, err
	}
	keys, srvPub, err := b.startConcentrator(ctx, tools, gomaxprocs)
	if err != nil {
		return r, err
	}
	base, err := b.memory()
	if err != nil {
		return r, err
	}
	r.RSSBaseBytes, r.HeapBaseBytes = base.RSSBytes, base.HeapBytes
	if err := b.startCPEs(keys, srvPub); err != nil {
		return r, err
	}
	if err := b.connect(ctx, &r); err != nil {
		return r, err
	}
	if err := b.idle(ctx, &r); err != nil {
		return r, err
	}
	if o.Active > 0 {
		if err := b.throughput(ctx, &r); err != nil {
			return r, err
		}
	}
	if o.Soak > 0 {
		if r.Soak, err = b.soak(ctx); err != nil {
			return r, err
		}
	}
	for _, w := range b.workers {
		r.SendDrops += w.sendDrops.Load()
	}
	// Last, as it leaves megabytes of garbage: `mptun status` lists
	// every connection.
	st, err := b.status(control.StatusRequest{})
	if err != nil {
		return r, err
	}
	for _, c := range st.Conns {
		if c.State == "open" {
			r.ListedConns++
		}
	}
	return r, nil
}

// network creates the two namespaces and their veth.
func (b *scaleBed) network(ctx context.Context) error {
	var err error
	if b.srv, err = netns.Add(ctx, netns.UniqueName("ssrv")); err != nil {
		return err
	}
	if b.cli, err = netns.Add(ctx, netns.UniqueName("scpe")); err != nil {
		return err
	}
	if err := netns.AddVeth(ctx, b.cli, "eth0", b.srv, "eth0"); err != nil {
		return err
	}
	steps := []ipStep{
		{b.srv, []string{"addr", "add", scaleSrv.String() + "/24", "dev", "eth0"}},
		{b.srv, []string{"link", "set", "eth0", "up"}},
		{b.srv, []string{"route", "add", scaleCPENet.String(), "via", scaleGW.String()}},
		{b.srv, []string{"route", "add", "blackhole", scaleSink.String() + "/32"}},
		{b.cli, []string{"addr", "add", scaleGW.String() + "/24", "dev", "eth0"}},
		{b.cli, []string{"link", "set", "eth0", "up"}},
		{b.cli, []string{"link", "set", "lo", "up"}},
		{b.cli, []string{"route", "add", "local", scaleCPENet.String(), "dev", "lo"}},
	}
	if err := runIPSteps(ctx, steps); err != nil {
		return err
	}
	// The sink's packets are forwarded into the blackhole, silently.
	return b.srv.Sysctl(ctx, "net.ipv4.ip_forward", "1")
}

// startConcentrator writes a concentrator config with a [[peer]] per CPE
// and starts mptund with GOMAXPROCS=gomaxprocs.
func (b *scaleBed) startConcentrator(ctx context.Context, tools Tools, gomaxprocs int) ([]noise.Key, noise.Key, error) {
	var err error
	if b.dir, err = os.MkdirTemp("", "mptun-scale"); err != nil {
		return nil, noise.Key{}, err
	}
	var peers strings.Builder
	srvKey, srvPub, keys, err := concentratorKeys(b.o.Clients, scaleInnerNet, &peers)
	if err != nil {
		return nil, noise.Key{}, err
	}
	b.sock = filepath.Join(b.dir, "srv.sock")
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "[tunnel]\nname = %q\naddresses = [\"%s/32\"]\n", scaleTUN, scaleSrvInner)
	fmt.Fprintf(&cfg, "[connection]\nrole = \"server\"\nprivate_key = %q\n", srvKey)
	cfg.WriteString(peers.String())
	fmt.Fprintf(&cfg, "[[listen]]\naddress = \"%s:6511\"\n[control]\nsocket = %q\n[log]\nlevel = \"warn\"\n",
		scaleSrv, b.sock)
	path := filepath.Join(b.dir, "srv.toml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		return nil, noise.Key{}, err
	}
	if b.daemon, b.log, err = launchMptund(ctx, b.srv, tools.Mptund, path, b.sock, gomaxprocs); err != nil {
		return nil, noise.Key{}, err
	}
	return keys, srvPub, nil
}

// concentratorKeys generates a concentrator's key and n CPE keys, and
// writes to peers a [[peer]] section per CPE allowing CPE i the address
// i+1 of inner.
func concentratorKeys(n int, inner netip.Prefix, peers *strings.Builder) (srvKey, srvPub noise.Key, keys []noise.Key, err error) {
	if srvKey, err = noise.GeneratePrivateKey(rand.Reader); err != nil {
		return
	}
	srvPub, _ = noise.PublicKey(srvKey)
	keys = make([]noise.Key, n)
	for i := range keys {
		if keys[i], err = noise.GeneratePrivateKey(rand.Reader); err != nil {
			return
		}
		pub, _ := noise.PublicKey(keys[i])
		fmt.Fprintf(peers, "[[peer]]\npublic_key = %q\nallowed_ips = [\"%s/32\"]\n", pub, nthAddr(inner, i+1))
	}
	return
}

// ipStep is one `ip` command in a namespace of a test bed.
type ipStep struct {
	ns   *netns.NS
	args []string
}

// runIPSteps runs steps in order and stops at the first failure.
func runIPSteps(ctx context.Context, steps []ipStep) error {
	for _, s := range steps {
		if err := s.ns.IP(ctx, s.args...); err != nil {
			return err
		}
	}
	return nil
}

// removeBed deletes a test bed's namespaces (nil ones were never made)
// and its temporary directory.
func removeBed(dir string, nss ...*netns.NS) {
	for _, ns := range nss {
		if ns != nil {
			ns.Delete()
		}
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// launchMptund starts mptund -c cfgPath in ns with GOMAXPROCS=gomaxprocs
// and waits until its control socket answers.
func launchMptund(ctx context.Context, ns *netns.NS, mptund, cfgPath, sock string, gomaxprocs int) (*proc, *syncBuffer, error) {
	log := &syncBuffer{max: 64 << 10}
	p := &proc{done: make(chan error, 1)}
	p.cmd = ns.Command(ctx, mptund, "-c", cfgPath)
	p.cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start mptund: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st control.Status
		if control.Call(sock, control.MethodStatus, nil, &st) == nil {
			return p, log, nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return nil, nil, fmt.Errorf("%w (%v):\n%s", errNoDaemon, err, log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, nil, fmt.Errorf("mptund: no control socket after 30 s:\n%s", log.String())
		}
	}
}

// startCPEs opens every CPE's socket in the client namespace and starts
// the workers; nothing is dialled yet.
func (b *scaleBed) startCPEs(keys []noise.Key, srvPub noise.Key) error {
	remote := netip.AddrPortFrom(scaleSrv, 6511)
	err := b.cli.Do(func() error {
		for i := range keys {
			fd, local, err := udpSocket(netip.AddrPortFrom(nthAddr(scaleCPENet, i+1), 0))
			if err != nil {
				return fmt.Errorf("cpe %d socket: %w", i, err)
			}
			c, err := newCPE(i, keys[i], srvPub, nthAddr(scaleInnerNet, i+1), []cpeSock{{fd, local}}, []netip.AddrPort{remote})
			if err != nil {
				unix.Close(fd)
				return err
			}
			b.cpes = append(b.cpes, c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := 0; i < len(b.cpes); i += cpesPerWorker {
		w, err := newCPEWorker(b.cpes[i:min(i+cpesPerWorker, len(b.cpes))], 2048)
		if err != nil {
			return err
		}
		b.workers = append(b.workers, w)
		go w.run()
	}
	return nil
}

// each runs fn on every CPE in its worker's goroutine. The workers run
// fn one at a time (mu), so that fn may count into shared variables.
func (b *scaleBed) each(fn func(now mono.Time, c *cpe)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, w := range b.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.do(func() {
				mu.Lock()
				defer mu.Unlock()
				now := mono.Now()
				for _, c := range w.cpes {
					fn(now, c)
				}
			})
		}()
	}
	wg.Wait()
}

// connect dials every CPE (all at once, or Rate per second) and waits
// until each is open or failed, or the connect timeout.
func (b *scaleBed) connect(ctx context.Context, r *ScaleRun) error {
	start := mono.Now().Add(20 * time.Millisecond)
	b.each(func(_ mono.Time, c *cpe) {
		c.dialAt = start
		if b.o.Rate > 0 {
			c.dialAt = start.Add(time.Duration(c.id) * time.Second / time.Duration(b.o.Rate))
		}
	})
	fmt.Fprintf(b.o.Log, "connecting %d CPEs\n", len(b.cpes))
	deadline := time.Now().Add(b.o.ConnectTimeout)
	if b.o.Rate > 0 {
		deadline = deadline.Add(time.Duration(len(b.cpes)) * time.Second / time.Duration(b.o.Rate))
	}
	for {
		var open, failed int
		b.each(func(_ mono.Time, c *cpe) {
			switch c.state {
			case cpeOpen:
				open++
			case cpeFailed:
				failed++
			}
		})
		if open+failed == len(b.cpes) || time.Now().After(deadline) {
			break
		}
		if err := b.alive(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	var times []time.Duration
	var last mono.Time
	r.Failures = map[string]int{}
	b.each(func(_ mono.Time, c *cpe) {
		switch c.state {
		case cpeOpen:
			times = append(times, c.openAt.Sub(c.dialAt))
			last = mono.Max(last, c.openAt)
		case cpeFailed:
			r.Failures[c.reason]++
		default:
			r.Failures["not open after the connect timeout"]++
		}
	})
	r.Connected = len(times)
	r.Failed = len(b.cpes) - r.Connected
	counted := r.Connected
	for _, n := range r.Failures {
		counted += n
	}
	if counted < len(b.cpes) {
		r.Failures["a CPE worker stopped (epoll error)"] += len(b.cpes) - counted
	}
	s := sortedDurations(times)
	r.ConnectP50Ms, r.ConnectP99Ms = msOf(percentile(s, 0.5)), msOf(percentile(s, 0.99))
	if len(s) > 0 {
		r.ConnectMaxMs = msOf(s[len(s)-1])
		r.ConnectAllS = last.Sub(start).Seconds()
	}
	fmt.Fprintf(b.o.Log, "  %d open, %d failed; connect p50 %.1f ms, p99 %.1f ms, all in %.2f s\n",
		r.Connected, r.Failed, r.ConnectP50Ms, r.ConnectP99Ms, r.ConnectAllS)
	// Every connection carries a little traffic, so that its queues and
	// windows come into use before the idle phase gives them back.
	b.each(func(now mono.Time, c *cpe) {
		if c.state != cpeOpen {
			return
		}
		pkt := bulkPacket(c.inner, scaleSink, 200)
		for range 10 {
			c.conn.Send(now, pkt)
		}
		c.dirty = true
	})
	st, err := b.status(control.StatusRequest{Summary: true})
	if err != nil {
		return err
	}
	r.ServerConns = st.ConnStates["open"]
	r.CookieReplies, r.ServerRateLimits = st.CookieReplies, st.Dropped["rate-limited"]
	return nil
}

// idle lets every CPE idle (keepalives only) and measures the
// concentrator's CPU over that time, then its memory.
func (b *scaleBed) idle(ctx context.Context, r *ScaleRun) error {
	open := func() int {
		n := 0
		b.each(func(_ mono.Time, c *cpe) {
			if c.state == cpeOpen {
				n++
			}
		})
		return n
	}
	before := open()
	// Let the warm-up traffic finish and the connections shrink first.
	if err := b.alive(ctx, 6*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(b.o.Log, "idle %v\n", b.o.Idle)
	cpu0, t0 := b.daemon.cpuSeconds(), time.Now()
	if err := b.alive(ctx, b.o.Idle); err != nil {
		return err
	}
	r.IdleCPUSeconds, r.IdleSeconds = b.daemon.cpuSeconds()-cpu0, time.Since(t0).Seconds()
	r.ClosedDuringIdle = before - open()
	if n := r.Connected; n > 0 {
		r.IdleCPUPerConnUs = r.IdleCPUSeconds / r.IdleSeconds / float64(n) * 1e6
	}
	m, err := b.memory()
	if err != nil {
		return err
	}
	r.RSSBytes, r.HeapBytes = m.RSSBytes, m.HeapBytes
	if n := r.Connected; n > 0 {
		r.RSSPerConnBytes = (float64(r.RSSBytes) - float64(r.RSSBaseBytes)) / float64(n)
		r.HeapPerConnBytes = (float64(r.HeapBytes) - float64(r.HeapBaseBytes)) / float64(n)
	}
	fmt.Fprintf(b.o.Log, "  CPU %.3f s in %.1f s: %.2f µs per connection per second; RSS %.1f MB (%.0f B/conn), heap %.1f MB (%.0f B/conn)\n",
		r.IdleCPUSeconds, r.IdleSeconds, r.IdleCPUPerConnUs, float64(r.RSSBytes)/1e6, r.RSSPerConnBytes,
		float64(r.HeapBytes)/1e6, r.HeapPerConnBytes)
	return nil
}

// throughput runs bulk flows on Active open CPEs and measures what the
// concentrator writes to its TUN.
func (b *scaleBed) throughput(ctx context.Context, r *ScaleRun) error {
	chosen := b.pickActive()
	n := len(chosen)
	b.each(func(_ mono.Time, c *cpe) {
		if chosen[c.id] && c.state == cpeOpen {
			c.active, c.pkt, c.queued = true, bulkPacket(c.inner, scaleSink, c.ep.MaxPayload()), 0
			c.resyncAt = 0
		}
	})
	defer b.each(func(_ mono.Time, c *cpe) { c.active = false })
	fmt.Fprintf(b.o.Log, "bulk flows on %d CPEs for %d s\n", n, b.o.Seconds)
	if err := b.alive(ctx, 2*time.Second); err != nil { // ramp-up
		return err
	}
	rx0, err := b.tunRx(ctx)
	if err != nil {
		return err
	}
	cpu0, gen0, t0 := b.daemon.cpuSeconds(), selfCPUSeconds(), time.Now()
	if err := b.alive(ctx, time.Duration(b.o.Seconds)*time.Second); err != nil {
		return err
	}
	rx1, err := b.tunRx(ctx)
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	r.ThroughputGbps = float64(rx1.bytes-rx0.bytes) * 8 / secs / 1e9
	r.ThroughputPPS = float64(rx1.packets-rx0.packets) / secs
	r.ThroughputCPUUtil = (b.daemon.cpuSeconds() - cpu0) / secs
	r.GeneratorCPUUtil = (selfCPUSeconds() - gen0) / secs
	fmt.Fprintf(b.o.Log, "  %.3f Gbit/s, %.0f packets/s into the concentrator's TUN; CPU cores: concentrator %.2f, CPEs (this process) %.2f\n",
		r.ThroughputGbps, r.ThroughputPPS, r.ThroughputCPUUtil, r.GeneratorCPUUtil)
	return nil
}

// pickActive chooses Active open CPEs spread over the concentrator's
// owners (round robin over the shards their source hashes to) and over
// the bench's workers, so that with two shards and two active CPEs each
// owner carries one flow and each flow has its own generator.
func (b *scaleBed) pickActive() map[int]bool {
	var open []*cpe
	b.each(func(_ mono.Time, c *cpe) {
		if c.state == cpeOpen {
			open = append(open, c)
		}
	})
	// Interleave the workers: the first CPE of each, then the second...
	slices.SortFunc(open, func(x, y *cpe) int {
		return cmp.Or(cmp.Compare(x.id%cpesPerWorker, y.id%cpesPerWorker), cmp.Compare(x.id, y.id))
	})
	chosen := map[int]bool{}
	for want := 0; len(chosen) < b.o.Active && len(chosen) < len(open); want = (want + 1) % b.shards {
		for _, c := range open {
			if !chosen[c.id] && datapath.SourceShard(c.socks[0].local, b.shards) == want {
				chosen[c.id] = true
				break
			}
		}
	}
	return chosen
}

// soak idles for Soak, sampling the concentrator's memory every 10 s.
func (b *scaleBed) soak(ctx context.Context) (*SoakResult, error) {
	s := &SoakResult{}
	before := 0
	b.each(func(_ mono.Time, c *cpe) {
		if c.state == cpeOpen {
			before++
		}
	})
	fmt.Fprintf(b.o.Log, "soak %v\n", b.o.Soak)
	t0 := time.Now()
	for {
		m, err := b.memory()
		if err != nil {
			return s, err
		}
		m.T = time.Since(t0).Seconds()
		s.Samples = append(s.Samples, m)
		fmt.Fprintf(b.o.Log, "  %5.0f s  RSS %.1f MB  heap %.1f MB\n", m.T, float64(m.RSSBytes)/1e6, float64(m.HeapBytes)/1e6)
		if time.Since(t0) >= b.o.Soak {
			break
		}
		if err := b.alive(ctx, min(10*time.Second, b.o.Soak-time.Since(t0))); err != nil {
			return s, err
		}
	}
	s.Seconds = time.Since(t0).Seconds()
	b.each(func(_ mono.Time, c *cpe) {
		if c.state == cpeOpen {
			before--
		}
	})
	s.Closed = before
	soakVerdict(s)
	fmt.Fprintf(b.o.Log, "  RSS %+.1f %%, heap %+.1f %%: flat %v\n", s.Growth.RSSPct, s.Growth.HeapPct, s.Flat)
	return s, nil
}

// alive waits d, failing early when the concentrator exits or ctx ends.
func (b *scaleBed) alive(ctx context.Context, d time.Duration) error {
	select {
	case err := <-b.daemon.done:
		b.daemon.done <- err
		return fmt.Errorf("%w (%v):\n%s", errNoDaemon, err, b.log.String())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (b *scaleBed) status(req control.StatusRequest) (control.Status, error) {
	var st control.Status
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := control.CallContext(ctx, b.sock, control.MethodStatus, req, &st)
	return st, err
}

// memory reads the concentrator's RSS and its live heap after a garbage
// collection (a status summary: no per-connection list to make garbage).
func (b *scaleBed) memory() (MemSample, error) {
	st, err := b.status(control.StatusRequest{Summary: true, GC: true})
	if err != nil {
		return MemSample{}, err
	}
	return MemSample{RSSBytes: rssBytes(b.daemon.cmd.Process.Pid), HeapBytes: st.Process.HeapLiveBytes}, nil
}

type ifCounters struct{ bytes, packets uint64 }

// tunRx reads the concentrator TUN's receive counters: what mptund wrote.
func (b *scaleBed) tunRx(ctx context.Context) (ifCounters, error) {
	out, err := b.srv.Output(ctx, "ip", "-s", "-j", "link", "show", "dev", scaleTUN)
	if err != nil {
		return ifCounters{}, fmt.Errorf("ip -s link: %w: %s", err, out)
	}
	var links []struct {
		Stats64 struct {
			Rx struct {
				Bytes   uint64 `json:"bytes"`
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) == 0 {
		return ifCounters{}, fmt.Errorf("ip -s link: %v: %s", err, out)
	}
	return ifCounters{links[0].Stats64.Rx.Bytes, links[0].Stats64.Rx.Packets}, nil
}

func (b *scaleBed) close() {
	for _, w := range b.workers {
		w.close()
	}
	if b.daemon != nil {
		b.daemon.stop()
	}
	removeBed(b.dir, b.cli, b.srv)
}

// rssBytes reads a process's resident set from /proc.
func rssBytes(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// selfCPUSeconds is this process's CPU time: the in-process CPEs share
// the machine's cores with the concentrator, so their load is part of
// every throughput figure.
func selfCPUSeconds() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// raiseNoFile lifts the open-file limit to want, or to the hard limit
// when that is at least need (a socket per CPE).
func raiseNoFile(want, need uint64) error {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= want {
		return nil
	}
	r := unix.Rlimit{Cur: want, Max: max(l.Max, want)}
	if unix.Setrlimit(unix.RLIMIT_NOFILE, &r) == nil {
		return nil
	}
	// Without CAP_SYS_RESOURCE: up to the hard limit, if that is enough.
	if l.Max < need {
		return fmt.Errorf("open-file limit: need %d, the hard limit is %d", need, l.Max)
	}
	l.Cur = l.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("open-file limit %d: %w", l.Max, err)
	}
	return nil
}

// syncBuffer keeps the first max bytes of a process's output, safely for
// the goroutine exec copies it with.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if room := s.max - s.buf.Len(); room > 0 {
		s.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
