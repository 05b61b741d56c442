// SPDX-License-Identifier: MIT

// Package wgpeer runs a wireguard-go device (built from the Go module, with
// its TUN and UDP offloads) as the lab's single-path reference tunnel. It is
// started as `mptun lab wgpeer -tun NAME` inside a namespace and reads its
// UAPI configuration (private_key=…, listen_port=…, public_key=…, …) from
// stdin; the lab runner puts the addresses on the device.
package wgpeer

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/mptun/mptun/internal/netns"
)

// Main runs the device until SIGTERM/SIGINT; args exclude "wgpeer".
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("wgpeer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("tun", "wg0", "TUN device name")
	mtu := fs.Int("mtu", 1420, "TUN MTU")
	verbose := fs.Bool("v", false, "verbose wireguard-go log")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	uapi, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "wgpeer: read config:", err)
		return 2
	}
	dev, err := tun.CreateTUN(*name, *mtu)
	if err != nil {
		fmt.Fprintf(stderr, "wgpeer: create tun %s: %v\n", *name, err)
		return 1
	}
	level := device.LogLevelError
	if *verbose {
		level = device.LogLevelVerbose
	}
	d := device.NewDevice(dev, conn.NewDefaultBind(), device.NewLogger(level, "wgpeer: "))
	defer d.Close()
	if err := d.IpcSet(string(uapi)); err != nil {
		fmt.Fprintln(stderr, "wgpeer: configure:", err)
		return 1
	}
	if err := d.Up(); err != nil {
		fmt.Fprintln(stderr, "wgpeer: up:", err)
		return 1
	}
	fmt.Fprintf(stderr, "wgpeer: %s up\n", *name)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-d.Wait():
	}
	return 0
}

// KeyPair returns a fresh Curve25519 key pair as the hex strings UAPI uses.
func KeyPair() (private, public string, err error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("wgpeer: key: %w", err)
	}
	return hex.EncodeToString(k.Bytes()), hex.EncodeToString(k.PublicKey().Bytes()), nil
}

// UAPIPair returns the UAPI configurations of a two-peer tunnel with fresh
// keys: the server listens on UDP 51820 at serverUnderlay, and each side
// routes the other's tunnel address (/32) to its peer.
func UAPIPair(serverUnderlay, serverTunnel, clientTunnel string) (server, client string, err error) {
	cliPriv, cliPub, err := KeyPair()
	if err != nil {
		return "", "", err
	}
	srvPriv, srvPub, err := KeyPair()
	if err != nil {
		return "", "", err
	}
	server = fmt.Sprintf("private_key=%s\nlisten_port=51820\npublic_key=%s\nallowed_ip=%s/32\n", srvPriv, cliPub, clientTunnel)
	client = fmt.Sprintf("private_key=%s\npublic_key=%s\nendpoint=%s:51820\nallowed_ip=%s/32\npersistent_keepalive_interval=1\n",
		cliPriv, srvPub, serverUnderlay, serverTunnel)
	return server, client, nil
}

// ConfigureDevice waits up to 5 s for the wgpeer process to create dev in
// ns (exited, if not nil, reports an early exit), then puts addr/24 on it
// and brings it up.
func ConfigureDevice(ctx context.Context, ns *netns.NS, dev, addr string, exited func() error) error {
	var lastErr error
	for i := 0; i < 50; i++ {
		if lastErr = ns.IP(ctx, "link", "show", dev); lastErr == nil {
			break
		}
		if exited != nil {
			if err := exited(); err != nil {
				return err
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lastErr != nil {
		return fmt.Errorf("wireguard-go: no device %s: %w", dev, lastErr)
	}
	if err := ns.IP(ctx, "addr", "add", addr+"/24", "dev", dev); err != nil {
		return err
	}
	return ns.IP(ctx, "link", "set", dev, "up")
}
