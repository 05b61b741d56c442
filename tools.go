//go:build tools

package mptun

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/google/gopacket/pcapgo"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/songgao/water"
	_ "golang.org/x/net/ipv4"
	_ "golang.org/x/sys/unix"
	_ "golang.zx2c4.com/wireguard/tun"
	_ "gonum.org/v1/plot"
)
