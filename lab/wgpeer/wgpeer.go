// SPDX-License-Identifier: MIT

// Package wgpeer runs a wireguard-go device (built from the Go module, with
// its TUN and UDP offloads) as the lab's single-path reference tunnel. It is
// started as `mptun lab wgpeer -tun NAME` inside a namespace and reads its
// UAPI configuration (private_key=…, listen_port=…, public_key=…, …) from
// stdin; the lab runner puts the addresses on the device.
package wgpeer

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
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
