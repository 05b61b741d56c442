// SPDX-License-Identifier: MIT

package daemon

import (
	"crypto/rand"
	"fmt"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// engineConfig is the engine's configuration for cfg, whose paths carry
// DCCP packets of at most maxPacket bytes.
func engineConfig(cfg *config.Config, maxPacket int) (mpdccp.Config, error) {
	cc := cfg.Connection
	ec := mpdccp.Config{
		ServiceCode: cc.ServiceCode,
		CCID:        cc.CCID,
		CC: ccid.Config{MSS: maxPacket, RateLimit: float64(cc.RateLimit),
			InitialWindow: cc.InitialWindow, HyStart: cc.HyStart, ABE: cc.ABE},
		Scheduler: cc.Scheduler,
		Reorderer: cc.Reorderer,
		Reorder: reorder.Config{
			MaxHold:     cc.ReorderMaxHold,
			BufferLimit: cc.ReorderBuffer,
			DropLate:    cc.DropLate,
			// Repair (gaps wait for their repair) follows Retransmit: the
			// engine sets it.
		},
		MaxPacket:   maxPacket,
		SendQueue:   cc.SendQueue,
		Retransmit:  cc.Retransmit,
		AQM:         &aqm.Config{Disabled: !cc.AQM, Target: cc.AQMTarget},
		Rand:        rand.Reader,
		KeepAlive:   cc.Keepalive,
		PathTimeout: cc.PathTimeout,
		ECN:         cc.ECN,
		ACKFilter:   cc.ACKFilter,
	}
	if base := cfg.Tuning.JoinPortBase; base > 0 {
		ec.JoinRemote = datapath.JoinAtServer(base, config.ServerIDBits)
	}
	if cc.Role == config.RoleServer {
		ec.Role = mpdccp.Server
		// A secure concentrator holds at most a connection per peer (and
		// one being set up): the peer list bounds it, not the default.
		ec.MaxConns = max(defaults.MaxConns, 2*len(cfg.Peers))
	}
	var err error
	if ec.Classes, err = classRules(cfg); err != nil {
		return mpdccp.Config{}, err
	}
	return ec, nil
}

// classRules turns the config's traffic classes into classifier rules. A
// class listing several port ranges becomes one rule per combination, all
// with the class's scheduler.
func classRules(cfg *config.Config) ([]scheduler.Rule, error) {
	var rules []scheduler.Rule
	for _, cl := range cfg.Connection.Classes {
		if len(cl.Dst) > 0 {
			return nil, fmt.Errorf("%s: connection.class.%s.dst: matching on destination prefixes is not supported yet", cfg.File, cl.Name)
		}
		src := portRanges(cl.SrcPorts)
		dst := portRanges(cl.DstPorts)
		for _, s := range src {
			for _, d := range dst {
				rules = append(rules, scheduler.Rule{Name: cl.Name, Proto: cl.Protocol, SrcPorts: s, DstPorts: d,
					DSCP: cl.DSCP, Scheduler: cl.Scheduler})
			}
		}
	}
	return rules, nil
}

func portRanges(rs []config.PortRange) []scheduler.PortRange {
	if len(rs) == 0 {
		return []scheduler.PortRange{{}} // any port
	}
	out := make([]scheduler.PortRange, len(rs))
	for i, r := range rs {
		out[i] = scheduler.PortRange{Lo: r.Lo, Hi: r.Hi}
	}
	return out
}
