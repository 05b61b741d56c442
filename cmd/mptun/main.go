// SPDX-License-Identifier: MIT

// Command mptun is mptun's command line: it talks to a running mptund over
// its control socket (package control only) and starts the built-in lab
// and the benchmarks, which live in mptun-lab.
//
//	mptun status [--json]                 connection, paths, RTT, cwnd, rate, loss, counters
//	mptun set scheduler|reorderer NAME    change at runtime
//	mptun set prio PATH-ID N              MP_PRIO of a path
//	mptun capture -w FILE [-d 10s] [-dccp FILE2]  pcap of the tunnel's datagrams as on the wire (+ IP protocol 33 form)
//	mptun monitor [--status] [--json]     live path and connection events
//	mptun lab run FILE [--out DIR]        run a lab scenario
//	mptun bench throughput|aggregate|handover|voip|cc|matrix|latency [--json]
//
// Global flags: -s SOCKET (default /run/mptun/mptun0.sock) or -i INSTANCE.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/jsonout"
)

var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type globals struct {
	socket string
	json   bool
	out    io.Writer
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: mptun [-s SOCKET | -i INSTANCE] COMMAND [--json] ...

commands:
  status                         show the connection, its paths and counters
  set scheduler NAME             change the scheduler at runtime
  set reorderer NAME             change the reorderer at runtime
  set hold DURATION              change the reorderer's longest hold (e.g. 150ms)
  set mode MODE                  aggregate, active-backup or switch
  set prio PATH N                set a path's MP_PRIO by id or name (0 never, 1 standby, 2 secondary, >=3 primary)
  capture -w FILE [-d DURATION] [-dccp FILE2]
                                 write the tunnel's datagrams as pcap (IP/UDP/DCCP as on the wire;
                                 FILE2: also as IP protocol 33) for DURATION
  monitor [--status] [-d DUR]    print path events as they happen (up, down, suspect, joins, rebinds, mode switches)
  lab run FILE [--out DIR]       run a lab scenario (root; in the mptun-lab program)
  bench throughput|aggregate|handover|voip|cc|matrix|latency [--json]   benchmarks against wireguard-go / kernel MPTCP (root; mptun-lab)
  genkey                         print a new private key (base64 X25519)
  pubkey                         read a private key on stdin, print its public key
  version
`)
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mptun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	g := globals{out: stdout}
	fs.StringVar(&g.socket, "s", "", "control `socket` of the daemon")
	instance := fs.String("i", "mptun0", "daemon `instance` (socket /run/mptun/INSTANCE.sock)")
	fs.BoolVar(&g.json, "json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if g.socket == "" {
		g.socket = filepath.Join("/run/mptun", *instance+".sock")
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr)
		return 2
	}
	cmd, rest := rest[0], rest[1:]
	rest, g.json = jsonout.StripFlag(rest, g.json)
	var err error
	switch cmd {
	case "status":
		err = cmdStatus(g, rest)
	case "set":
		err = cmdSet(g, rest)
	case "capture":
		err = cmdCapture(g, rest, stderr)
	case "monitor":
		err = cmdMonitor(g, rest, stderr)
	case "lab", "bench":
		return labCommand(cmd, rest, g.json, stdout, stderr)
	case "genkey":
		err = cmdGenkey(rest, stdout)
	case "pubkey":
		err = cmdPubkey(rest, os.Stdin, stdout)
	case "version":
		fmt.Fprintln(stdout, "mptun", version)
	case "help", "-h", "--help":
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "mptun: unknown command %q\n", cmd)
		usage(stderr)
		return 2
	}
	if err != nil {
		var ue usageError
		fmt.Fprintln(stderr, "mptun:", err)
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func cmdStatus(g globals, args []string) error {
	if len(args) != 0 {
		return usageError{"status takes no arguments"}
	}
	var st control.Status
	if err := control.Call(g.socket, control.MethodStatus, nil, &st); err != nil {
		return fmt.Errorf("status via %s: %w", g.socket, err)
	}
	if g.json {
		return jsonout.Print(g.out, st)
	}
	printStatus(g.out, st)
	return nil
}

func printStatus(w io.Writer, st control.Status) {
	if st.APIVersion != control.APIVersion {
		fmt.Fprintf(w, "(the daemon speaks control API version %d, this mptun version %d: fields may be missing)\n",
			st.APIVersion, control.APIVersion)
	}
	fmt.Fprintf(w, "%s %s  inner MTU %d  up %s  security %s\n", st.Role, st.Tunnel, st.InnerMTU,
		(time.Duration(st.UptimeS) * time.Second).String(), st.Security)
	if st.PublicKey != "" {
		fmt.Fprintf(w, "public key %s  cookie replies %d\n", st.PublicKey, st.CookieReplies)
	}
	if len(st.Conns) == 0 {
		fmt.Fprintln(w, "no connection")
	}
	for _, c := range st.Conns {
		fmt.Fprintf(w, "connection %s  CI %08x/%08x  scheduler %s  reorderer %s (hold %.0f ms, repair %v)  mode %s  queued %d\n",
			c.State, c.LocalCI, c.PeerCI, c.Scheduler, c.Reorderer, c.ReorderHoldMs, c.Repair, st.Mode, c.Queued)
		if c.Peer != "" {
			fmt.Fprintf(w, "  peer %s  %s\n", c.Peer, c.AEAD)
		}
		fmt.Fprintf(w, "  sent %d pkts %s  delivered %d pkts %s  queue drops %d\n",
			c.SentPackets, bytesStr(c.SentBytes), c.DeliveredPackets, bytesStr(c.DeliveredBytes), c.QueueDrops)
		fmt.Fprintf(w, "  reorder: in order %d  held %d  path order %d  out of order %d  gaps skipped %d  late %d  dup %d  class (at once) %d\n",
			c.Reorder.InOrder, c.Reorder.Held, c.Reorder.PathOrdered, c.Reorder.OutOfOrder, c.Reorder.GapsSkipped,
			c.Reorder.GapsLateArrive, c.Reorder.Duplicates, c.Reorder.Urgent)
		fmt.Fprintf(w, "  repair: path losses %d  NACKs %d (sent %d, received %d)  repaired here %d  given up %d  resent by us %d\n",
			c.Reorder.Holes, c.Reorder.NACKs, c.NACKsSent, c.NACKsReceived, c.Reorder.Repaired, c.Reorder.RepairGivenUp, c.Repaired)
		fmt.Fprintf(w, "  %-3s %-8s %-9s %-4s %-6s %-10s %8s %8s %6s %9s %9s %7s %s\n",
			"id", "name", "state", "prio", "ccid", "phase", "rtt ms", "min ms", "cwnd", "rate Mb/s", "pace Mb/s", "loss %", "remote")
		for _, p := range c.Paths {
			state := p.State
			switch {
			case p.Failed:
				state = "FAILED"
			case p.Suspect:
				state = "suspect"
			}
			fmt.Fprintf(w, "  %-3d %-8s %-9s %-4d %-6s %-10s %8.1f %8.1f %6d %9.2f %9.2f %7.2f %s\n",
				p.ID, p.Name, state, p.Prio, p.CCID, p.Phase, p.RTTms, p.MinRTTms, p.Cwnd, p.RateMbps,
				p.PacingMbps, p.LossPct, p.Remote)
		}
	}
	for _, p := range st.Paths {
		if p.Local == "" {
			fmt.Fprintf(w, "path %s: no socket (link %s: waiting for an address)\n", p.Name, p.Link)
		} else if !p.LinkUp {
			fmt.Fprintf(w, "path %s: link %s down\n", p.Name, p.Link)
		}
	}
	dp := st.Datapath
	fmt.Fprintf(w, "datapath: tun in %d out %d  udp in %d out %d (%d sendmmsg)  drops: too-big %d no-route %d queue %d ecn %d  timer late p50 %.0fµs p99 %.0fµs\n",
		dp.TUNRead, dp.TUNWritten, dp.UDPRead, dp.UDPWritten, dp.UDPSendCalls, dp.DroppedTooBig,
		dp.DroppedNoRoute, dp.DroppedQueueFull, dp.DroppedECN, dp.TimerLateP50us, dp.TimerLateP99us)
	if len(st.Dropped) > 0 {
		fmt.Fprintf(w, "dropped datagrams: %v\n", st.Dropped)
	}
}

func bytesStr(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func cmdSet(g globals, args []string) error {
	var req control.SetRequest
	switch {
	case len(args) == 2 && args[0] == "scheduler":
		req.Scheduler = args[1]
	case len(args) == 2 && args[0] == "reorderer":
		req.Reorderer = args[1]
	case len(args) == 2 && args[0] == "hold":
		req.Hold = args[1]
	case len(args) == 2 && args[0] == "mode":
		req.Mode = args[1]
	case len(args) == 3 && args[0] == "prio":
		prio, err := strconv.ParseUint(args[2], 10, 4)
		if err != nil {
			return usageError{"set prio PATH N: PATH is a path id or name, N is 0..15"}
		}
		p := uint8(prio)
		req.Prio = &p
		if id, err := strconv.Atoi(args[1]); err == nil {
			req.Path = &id
		} else {
			req.PathName = args[1]
		}
	default:
		return usageError{"set scheduler NAME | set reorderer NAME | set hold DURATION | set mode MODE | set prio PATH N"}
	}
	if err := control.Call(g.socket, control.MethodSet, req, nil); err != nil {
		return err
	}
	if g.json {
		return jsonout.Print(g.out, map[string]bool{"ok": true})
	}
	fmt.Fprintln(g.out, "ok")
	return nil
}

func cmdCapture(g globals, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("w", "", "pcap `file` to write: the datagrams as on the wire (IP, UDP, DCCP)")
	native := fs.String("dccp", "", "also write the datagrams to this pcap `file` as IP protocol 33 (UDP header removed)")
	dur := fs.Duration("d", 10*time.Second, "how long to capture")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if *file == "" {
		return usageError{"capture needs -w FILE"}
	}
	abs, err := filepath.Abs(*file)
	if err != nil {
		return err
	}
	req := control.CaptureRequest{File: abs, Seconds: dur.Seconds()}
	if *native != "" {
		if req.DCCPFile, err = filepath.Abs(*native); err != nil {
			return err
		}
	}
	if err := control.Call(g.socket, control.MethodCapture, req, nil); err != nil {
		return err
	}
	time.Sleep(*dur + 100*time.Millisecond)
	if g.json {
		return jsonout.Print(g.out, req)
	}
	if req.DCCPFile != "" {
		fmt.Fprintf(g.out, "wrote %s and %s (%s)\n", abs, req.DCCPFile, *dur)
		return nil
	}
	fmt.Fprintf(g.out, "wrote %s (%s)\n", abs, *dur)
	return nil
}
