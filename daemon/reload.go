// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/pathmgr"
)

// reloadKey is one config key and whether a reload may change it while
// the daemon runs. Field is its place in config.Config (dotted).
type reloadKey struct {
	field string
	key   string
	live  bool
}

// reloadKeys covers every field of config.Config (a test walks the struct
// to keep it so). Live keys reach the open connections and the ones
// opened later through the path manager; the others are refused by name.
var reloadKeys = []reloadKey{
	{"Tunnel.Name", "tunnel.name", false},
	{"Tunnel.Driver", "tunnel.driver", false},
	{"Tunnel.MTU", "tunnel.mtu", false},
	{"Tunnel.Addresses", "tunnel.addresses", false},
	{"Tunnel.Routes", "tunnel.routes", false},
	{"Connection.Role", "connection.role", false},
	{"Connection.CCID", "connection.ccid", true},
	{"Connection.Scheduler", "connection.scheduler", true},
	{"Connection.Reorderer", "connection.reorderer", true},
	{"Connection.ReorderMaxHold", "connection.reorder_max_hold", true},
	{"Connection.ReorderBuffer", "connection.reorder_buffer", true},
	{"Connection.DropLate", "connection.drop_late", true},
	{"Connection.ServiceCode", "connection.service_code", false},
	{"Connection.Keepalive", "connection.keepalive", true},
	{"Connection.PathTimeout", "connection.path_timeout", true},
	{"Connection.SendQueue", "connection.send_queue", false},
	{"Connection.AQM", "connection.aqm", false},
	{"Connection.Retransmit", "connection.retransmit", true},
	{"Connection.AQMTarget", "connection.aqm_target", false},
	{"Connection.RateLimit", "connection.rate_limit", false},
	{"Connection.ECN", "connection.ecn", false},
	{"Connection.HyStart", "connection.hystart", false},
	{"Connection.ACKFilter", "connection.ack_filter", false},
	{"Connection.ABE", "connection.abe", false},
	{"Connection.InitialWindow", "connection.initial_window", false},
	{"Connection.Classes", "connection.class", false},
	{"Connection.Mode", "connection.mode", true},
	{"Connection.Switch", "connection.switch", true},
	{"Connection.Advertise", "connection.advertise", true},
	{"Connection.ReconnectMax", "connection.reconnect_max", true},
	{"Connection.Security", "connection.security", false},
	{"Connection.PrivateKey", "connection.private_key (or private_key_file)", false},
	{"Peers", "peer", false},
	{"Listen", "listen", false},
	{"Paths", "path", true}, // per path: see pathChanges
	{"Offload", "offload", false},
	{"Control.Socket", "control.socket", false},
	{"Metrics.Listen", "metrics.listen", false},
	{"Web.Listen", "web.listen", false},
	{"Tuning.Shards", "tuning.shards", false},
	{"Tuning.ServerID", "tuning.server_id", false},
	{"Tuning.HasServerID", "tuning.server_id", false},
	{"Tuning.JoinPortBase", "tuning.join_port_base", false},
	{"Log.Level", "log.level", false},
	{"Log.Format", "log.format", false},
	{"Capture.File", "capture.file", false},
	{"Capture.MaxSize", "capture.max_size", false},
}

// fieldOf reads a dotted field of a config.
func fieldOf(c *config.Config, dotted string) any {
	v := reflect.ValueOf(c).Elem()
	for _, f := range strings.Split(dotted, ".") {
		v = v.FieldByName(f)
	}
	return v.Interface()
}

// configChanges lists the keys that differ between old and cfg: the ones
// a reload applies and the ones that need a restart.
func configChanges(old, cfg *config.Config) (live, restart []string) {
	for _, k := range reloadKeys {
		if reflect.DeepEqual(fieldOf(old, k.field), fieldOf(cfg, k.field)) {
			continue
		}
		if k.field == "Paths" {
			l, r := pathChanges(old.Paths, cfg.Paths)
			live, restart = append(live, l...), append(restart, r...)
			continue
		}
		if k.live {
			live = append(live, k.key)
		} else {
			restart = append(restart, k.key)
		}
	}
	return live, restart
}

// pathChanges: paths may come, go and change (they are bound and joined
// again), except for their MTU, which sizes the tunnel.
func pathChanges(old, cur []config.Path) (live, restart []string) {
	prev := map[string]config.Path{}
	for _, p := range old {
		prev[p.Name] = p
	}
	for _, p := range cur {
		o, ok := prev[p.Name]
		delete(prev, p.Name)
		switch {
		case !ok:
			live = append(live, "path."+p.Name+" (added)")
		case o.MTU != p.MTU:
			restart = append(restart, "path."+p.Name+".mtu")
		case o != p:
			live = append(live, "path."+p.Name)
		}
	}
	for name := range prev {
		live = append(live, "path."+name+" (removed)")
	}
	if len(cur) > 0 && len(old) > 0 && minMTU(cur) != minMTU(old) && len(restart) == 0 {
		restart = append(restart, "path.mtu (an added or removed path changes the tunnel's packet size)")
	}
	return live, restart
}

func minMTU(ps []config.Path) int {
	m := 1 << 30
	for _, p := range ps {
		m = min(m, p.MTU)
	}
	return m
}

// Reload applies a re-read config: every changed key either reaches the
// open connections and the ones opened later, or the whole reload is
// refused, naming the keys that need a restart. Nothing changes then.
func (d *Daemon) Reload(cfg *config.Config) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	old := d.config()
	live, restart := configChanges(old, cfg)
	if len(restart) > 0 {
		return fmt.Errorf("%s: %s changed: these need a restart (nothing was applied)", cfg.File, strings.Join(restart, ", "))
	}
	if len(live) == 0 {
		d.cfgp.Store(cfg)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := d.withManager(ctx, func(now mono.Time, m *pathmgr.Manager) error {
		if err := m.Apply(now, settingsOf(cfg)); err != nil {
			return err
		}
		if cfg.Connection.ReconnectMax != old.Connection.ReconnectMax {
			if err := m.SetBackoffMax(cfg.Connection.ReconnectMax); err != nil {
				return err
			}
		}
		m.SetAdvertise(cfg.Connection.Advertise)
		if cfg.Connection.Role == config.RoleClient {
			return m.Reconfigure(now, pathSpecs(cfg))
		}
		return nil
	})
	if err != nil {
		// Apply checks everything before it changes anything; a path
		// error after it leaves the settings applied, which the message
		// says.
		return errors.Join(fmt.Errorf("%s: reload", cfg.File), err)
	}
	if err := d.routes.apply(cfg, d.log); err != nil {
		return fmt.Errorf("%s: reload: policy routing: %w", cfg.File, err)
	}
	d.cfgp.Store(cfg)
	d.log.Info("config reloaded", "file", cfg.File, "changed", strings.Join(live, ", "))
	return nil
}
