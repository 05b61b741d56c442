// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/mptun/mptun/internal/defaults"
)

// Names lists the component names the daemon has registered (ccid.Names(),
// scheduler.Names(), reorder.Names()). A nil list accepts any name that
// looks like one; the daemon passes the registries so typos are caught at
// load time with a line number.
type Names struct {
	CCIDs      []string
	Schedulers []string
	Reorderers []string
}

// Load reads, decodes and validates the file at path. Content problems are
// returned as an ErrorList (see IsInvalid).
func Load(path string) (*Config, error) { return LoadWith(path, Names{}) }

// LoadWith is Load that also checks component names against names.
func LoadWith(path string, names Names) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(filepath.Base(path), path, data, names)
}

// Parse validates data as the content of a config file. name is used in
// error messages, path is recorded in Config.File and gives the instance
// name substituted for %i.
func Parse(name, path string, data []byte, names Names) (*Config, error) {
	c := &checker{file: name, idx: newLineIndex(string(data)), names: names}
	var raw rawConfig
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		c.decodeError(err)
		return nil, c.errs
	}
	c.md = &md
	c.raw = &raw
	c.unknownKeys()
	cfg := c.convert(&raw, path)
	if len(c.errs) > 0 {
		slices.SortStableFunc(c.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, c.errs
	}
	return cfg, nil
}

type rawConfig struct {
	Tunnel struct {
		Name      *string  `toml:"name"`
		Driver    *string  `toml:"driver"`
		MTU       int64    `toml:"mtu"`
		Addresses []string `toml:"addresses"`
		Routes    []string `toml:"routes"`
	} `toml:"tunnel"`
	Connection rawConnection `toml:"connection"`
	Listen     []rawListen   `toml:"listen"`
	Path       []rawPath     `toml:"path"`
	Peer       []rawPeer     `toml:"peer"`
	Offload    struct {
		TUN    *bool `toml:"tun"`
		UDPGSO *bool `toml:"udp_gso"`
		UDPGRO *bool `toml:"udp_gro"`
	} `toml:"offload"`
	Control struct {
		Socket *string `toml:"socket"`
	} `toml:"control"`
	Metrics struct {
		Listen string `toml:"listen"`
	} `toml:"metrics"`
	Web rawWeb `toml:"web"`
	Log struct {
		Level  *string `toml:"level"`
		Format *string `toml:"format"`
	} `toml:"log"`
	Capture struct {
		File    string `toml:"file"`
		MaxSize int64  `toml:"max_size"`
	} `toml:"capture"`
	Tuning rawTuning `toml:"tuning"`
}

type rawClass struct {
	Name      string   `toml:"name"`
	Protocol  *string  `toml:"protocol"`
	SrcPorts  []string `toml:"src_ports"`
	DstPorts  []string `toml:"dst_ports"`
	DSCP      []int64  `toml:"dscp"`
	Dst       []string `toml:"dst"`
	Scheduler string   `toml:"scheduler"`
}

type rawListen struct {
	Address *string `toml:"address"`
	Device  string  `toml:"device"`
	Fwmark  int64   `toml:"fwmark"`
}

type rawPath struct {
	Name   string  `toml:"name"`
	Local  string  `toml:"local"`
	Device string  `toml:"device"`
	Fwmark int64   `toml:"fwmark"`
	Remote *string `toml:"remote"`
	Prio   *int64  `toml:"prio"`
	Weight *int64  `toml:"weight"`
	CCID   string  `toml:"ccid"`
	MTU    *int64  `toml:"mtu"`

	Routing *string `toml:"routing"`
	Table   *int64  `toml:"table"`
	Gateway string  `toml:"gateway"`
}

type checker struct {
	file  string
	idx   *lineIndex
	md    *toml.MetaData
	names Names
	raw   *rawConfig
	errs  ErrorList
}

// at is where a value sits: the indexed key finds the line, the display
// key is what the user reads ("path.dsl.remote").
type at struct{ indexed, display string }

func top(key string) at { return at{key, key} }

// field returns the location of a key inside an array-of-tables element,
// shown by the element's name when it has one.
func elem(table string, i int, name string) func(string) at {
	indexed := fmt.Sprintf("%s[%d]", table, i)
	display := indexed
	if name != "" && validName(name) {
		display = table + "." + name
	}
	return func(k string) at {
		if k == "" {
			return at{indexed, display}
		}
		return at{indexed + "." + k, display + "." + k}
	}
}

func (c *checker) errf(a at, format string, args ...any) {
	c.errs = append(c.errs, &Error{File: c.file, Line: c.idx.line(a.indexed), Key: a.display, Msg: fmt.Sprintf(format, args...)})
}

var reLastKey = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

var reBadType = regexp.MustCompile(`^incompatible types: TOML value has type (\S+); destination has type (\S+)$`)

// tomlType names a Go type the way a TOML user knows it.
func tomlType(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "integer"
	case strings.HasPrefix(goType, "float"):
		return "float"
	case goType == "bool":
		return "boolean"
	case goType == "string":
		return "string"
	case strings.HasPrefix(goType, "[]"), goType == "slice", goType == "array":
		return "array"
	case strings.HasPrefix(goType, "map"), strings.HasPrefix(goType, "config."), strings.HasPrefix(goType, "struct"), goType == "table":
		return "table"
	case strings.HasPrefix(goType, "time."):
		return "date-time"
	}
	return goType
}

// decodeError turns a BurntSushi/toml error into an *Error.
func (c *checker) decodeError(err error) {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		c.errs = append(c.errs, &Error{File: c.file, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message})
		return
	}
	if m := reLastKey.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		msg := m[3]
		if t := reBadType.FindStringSubmatch(msg); t != nil {
			msg = fmt.Sprintf("wrong type: got %s, want %s", tomlType(t[1]), tomlType(t[2]))
		}
		c.errs = append(c.errs, &Error{File: c.file, Line: line, Key: m[2], Msg: msg})
		return
	}
	c.errs = append(c.errs, &Error{File: c.file, Msg: strings.TrimPrefix(err.Error(), "toml: ")})
}

// unknownKeys reports keys that matched no field, and keys whose case
// differs from the schema (the decoder would silently accept "Name").
func (c *checker) unknownKeys() {
	seen := map[string]int{}
	for _, k := range c.md.Undecoded() {
		plain := k.String()
		n := seen[plain]
		seen[plain] = n + 1
		a := top(plain)
		if ik, ok := c.idx.nth(plain, n); ok {
			a = c.displayOf(ik.indexed)
		}
		c.errf(a, "unknown key")
	}
	seen = map[string]int{}
	for _, k := range c.md.Keys() {
		plain := k.String()
		n := seen[plain]
		seen[plain] = n + 1
		if strings.ToLower(plain) == plain {
			continue
		}
		a := top(plain)
		if ik, ok := c.idx.nth(plain, n); ok {
			a = c.displayOf(ik.indexed)
		}
		c.errf(a, "unknown key (keys are lower case)")
	}
}

// displayOf maps "path[1].bogus" to path 1's display name.
func (c *checker) displayOf(indexed string) at {
	for _, t := range []string{"path", "connection.class", "listen", "peer"} {
		rest, ok := strings.CutPrefix(indexed, t+"[")
		if !ok {
			continue
		}
		num, key, ok := strings.Cut(rest, "]")
		i, err := strconv.Atoi(num)
		if !ok || err != nil {
			break
		}
		name := ""
		switch {
		case t == "path" && i < len(c.raw.Path):
			name = c.raw.Path[i].Name
		case t == "connection.class" && i < len(c.raw.Connection.Class):
			name = c.raw.Connection.Class[i].Name
		}
		return elem(t, i, name)(strings.TrimPrefix(key, "."))
	}
	return at{indexed, indexed}
}

func (c *checker) convert(raw *rawConfig, path string) *Config {
	cfg := &Config{File: path}
	c.tunnel(raw, &cfg.Tunnel)
	c.connection(raw, &cfg.Connection)
	c.listens(raw, cfg)
	c.paths(raw, cfg)
	c.security(raw, cfg, path)
	c.tuning(raw, cfg)

	cfg.Offload = Offload{
		TUN:    deref(raw.Offload.TUN, true),
		UDPGSO: deref(raw.Offload.UDPGSO, true),
		UDPGRO: deref(raw.Offload.UDPGRO, true),
	}

	cfg.Control.Socket = deref(raw.Control.Socket, DefaultControlPattern)
	instance := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	cfg.Control.Socket = strings.ReplaceAll(cfg.Control.Socket, "%i", instance)
	if s := cfg.Control.Socket; s != "" && !filepath.IsAbs(s) {
		c.errf(top("control.socket"), "must be an absolute path, got %q", s)
	}

	if l := raw.Metrics.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil {
			c.errf(top("metrics.listen"), "invalid listen address %q: want host:port", l)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			c.errf(top("metrics.listen"), "invalid port %q", port)
		}
		cfg.Metrics.Listen = l
	}
	c.web(raw, cfg)

	cfg.Log.Level = deref(raw.Log.Level, "info")
	c.oneOf(top("log.level"), cfg.Log.Level, "debug", "info", "warn", "error")
	cfg.Log.Format = deref(raw.Log.Format, "text")
	c.oneOf(top("log.format"), cfg.Log.Format, "text", "json")

	cfg.Capture.File = raw.Capture.File
	if m := raw.Capture.MaxSize; m != 0 && (m < minCaptureSize || m > 1<<40) {
		c.errf(top("capture.max_size"), "%d out of range: 0 (unlimited) or %d..%d bytes", m, minCaptureSize, int64(1)<<40)
	}
	cfg.Capture.MaxSize = raw.Capture.MaxSize
	return cfg
}

func (c *checker) tunnel(raw *rawConfig, t *Tunnel) {
	rt := &raw.Tunnel
	t.Name = deref(rt.Name, DefaultTunnelName)
	if !validIfName(t.Name) {
		c.errf(top("tunnel.name"), "invalid interface name %q (1-15 characters, no '/', ':' or blanks)", t.Name)
	}
	t.Driver = deref(rt.Driver, "wireguard")
	c.oneOf(top("tunnel.driver"), t.Driver, "wireguard", "water")
	hasV6 := false
	for i, s := range rt.Addresses {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			c.errf(top("tunnel.addresses"), "invalid address/prefix %q (entry %d)", s, i+1)
			continue
		}
		hasV6 = hasV6 || p.Addr().Is6()
		t.Addresses = append(t.Addresses, p)
	}
	for i, s := range rt.Routes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			c.errf(top("tunnel.routes"), "invalid prefix %q (entry %d)", s, i+1)
			continue
		}
		if p != p.Masked() {
			c.errf(top("tunnel.routes"), "route %q has host bits set; did you mean %q?", s, p.Masked())
			continue
		}
		t.Routes = append(t.Routes, p)
	}
	t.MTU = int(rt.MTU)
	minMTU := int64(68)
	if hasV6 {
		minMTU = 1280
	}
	if rt.MTU != 0 && (rt.MTU < minMTU || rt.MTU > 65535) {
		c.errf(top("tunnel.mtu"), "%d out of range: 0 (derive) or %d..65535", rt.MTU, minMTU)
	}
}

type rawConnection struct {
	Role           string     `toml:"role"`
	CCID           *string    `toml:"ccid"`
	Scheduler      *string    `toml:"scheduler"`
	Reorderer      *string    `toml:"reorderer"`
	ReorderMaxHold *string    `toml:"reorder_max_hold"`
	ReorderBuffer  *int64     `toml:"reorder_buffer"`
	DropLate       bool       `toml:"drop_late"`
	ServiceCode    *int64     `toml:"service_code"`
	Keepalive      *string    `toml:"keepalive"`
	PathTimeout    *string    `toml:"path_timeout"`
	SendQueue      *int64     `toml:"send_queue"`
	AQM            *bool      `toml:"aqm"`
	Retransmit     *bool      `toml:"retransmit"`
	AQMTarget      *string    `toml:"aqm_target"`
	RateLimit      *string    `toml:"rate_limit"`
	ECN            *bool      `toml:"ecn"`
	HyStart        *bool      `toml:"hystart"`
	ACKFilter      *bool      `toml:"ack_filter"`
	ABE            *bool      `toml:"abe"`
	InitialWindow  *int64     `toml:"initial_window"`
	Class          []rawClass `toml:"class"`
	Mode           *string    `toml:"mode"`
	Switch         struct {
		RTTHigh  *string  `toml:"rtt_high"`
		RTTLow   *string  `toml:"rtt_low"`
		LossHigh *float64 `toml:"loss_high"`
		LossLow  *float64 `toml:"loss_low"`
		Hold     *string  `toml:"hold"`
	} `toml:"switch"`
	Advertise      []string `toml:"advertise"`
	ReconnectMax   *string  `toml:"reconnect_max"`
	Security       *string  `toml:"security"`
	PrivateKey     *string  `toml:"private_key"`
	PrivateKeyFile *string  `toml:"private_key_file"`
}

func (c *checker) connection(raw *rawConfig, conn *Connection) {
	rc := &raw.Connection
	conn.Role = rc.Role
	switch {
	case !c.md.IsDefined("connection", "role"):
		c.errf(top("connection.role"), "missing: set \"client\" or \"server\"")
	default:
		c.oneOf(top("connection.role"), rc.Role, RoleClient, RoleServer)
	}
	conn.CCID = deref(rc.CCID, defaults.CCID)
	c.name(top("connection.ccid"), "congestion controller", conn.CCID, c.names.CCIDs)
	conn.Scheduler = deref(rc.Scheduler, defaults.Scheduler)
	c.name(top("connection.scheduler"), "scheduler", conn.Scheduler, c.names.Schedulers)
	conn.Reorderer = deref(rc.Reorderer, defaults.Reorderer)
	c.name(top("connection.reorderer"), "reorderer", conn.Reorderer, c.names.Reorderers)

	// "auto" (0): the hold follows the paths' delays and the loss
	// repair's round trip.
	if rc.ReorderMaxHold == nil || *rc.ReorderMaxHold != "auto" {
		conn.ReorderMaxHold = c.duration(top("connection.reorder_max_hold"), rc.ReorderMaxHold, defaults.ReorderMaxHold, time.Microsecond, 10*time.Second)
	}
	conn.ReorderBuffer = int(c.intIn(top("connection.reorder_buffer"), rc.ReorderBuffer, defaults.ReorderBuffer, 1, 1<<20))
	conn.DropLate = rc.DropLate
	sc := c.intIn(top("connection.service_code"), rc.ServiceCode, DefaultServiceCode, 0, math.MaxUint32-1)
	conn.ServiceCode = uint32(sc)
	conn.Keepalive = c.duration(top("connection.keepalive"), rc.Keepalive, defaults.Keepalive, 10*time.Millisecond, time.Hour)
	conn.PathTimeout = c.duration(top("connection.path_timeout"), rc.PathTimeout, defaults.PathTimeout, 10*time.Millisecond, time.Hour)
	if conn.Keepalive > 0 && conn.PathTimeout > 0 && conn.PathTimeout <= conn.Keepalive {
		c.errf(top("connection.path_timeout"), "%v must be longer than keepalive %v", conn.PathTimeout, conn.Keepalive)
	}
	conn.SendQueue = int(c.intIn(top("connection.send_queue"), rc.SendQueue, defaults.SendQueue, 1, 1<<20))
	conn.AQM = deref(rc.AQM, defaults.AQM)
	conn.Retransmit = deref(rc.Retransmit, defaults.Retransmit)
	conn.AQMTarget = c.duration(top("connection.aqm_target"), rc.AQMTarget, defaults.AQMTarget, 100*time.Microsecond, 10*time.Second)
	conn.ECN = deref(rc.ECN, defaults.ECN)
	conn.HyStart = deref(rc.HyStart, defaults.HyStart)
	conn.ACKFilter = deref(rc.ACKFilter, defaults.ACKFilter)
	conn.ABE = deref(rc.ABE, defaults.ABE)
	conn.InitialWindow = int(c.intIn(top("connection.initial_window"), rc.InitialWindow, defaults.InitialWindow, 0, 1000))
	if rc.RateLimit != nil {
		r, err := ParseRate(*rc.RateLimit)
		if err != nil {
			c.errf(top("connection.rate_limit"), "%v", err)
		}
		conn.RateLimit = r
	}

	c.modes(rc, conn)

	names := map[string]bool{}
	for i, rcl := range rc.Class {
		f := elem("connection.class", i, rcl.Name)
		cl := Class{Name: rcl.Name, Scheduler: rcl.Scheduler}
		switch {
		case rcl.Name == "":
			c.errf(f(""), "missing name")
		case !validName(rcl.Name):
			c.errf(f("name"), "invalid name %q (letters, digits, '-' and '_', up to 32)", rcl.Name)
		case names[rcl.Name]:
			c.errf(f("name"), "duplicate class name %q", rcl.Name)
		}
		names[rcl.Name] = true
		if rcl.Protocol != nil {
			p, err := parseProtocol(*rcl.Protocol)
			if err != nil {
				c.errf(f("protocol"), "%v", err)
			}
			cl.Protocol = p
		}
		cl.SrcPorts = c.ports(f("src_ports"), rcl.SrcPorts)
		cl.DstPorts = c.ports(f("dst_ports"), rcl.DstPorts)
		if (len(cl.SrcPorts) > 0 || len(cl.DstPorts) > 0) && cl.Protocol != 6 && cl.Protocol != 17 && cl.Protocol != 132 && cl.Protocol != 33 {
			c.errf(f("protocol"), "ports need protocol \"tcp\", \"udp\", \"sctp\" or \"dccp\"")
		}
		for _, d := range rcl.DSCP {
			if d < 0 || d > 63 {
				c.errf(f("dscp"), "%d out of range 0..63", d)
				continue
			}
			cl.DSCP = append(cl.DSCP, uint8(d))
		}
		for _, s := range rcl.Dst {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				c.errf(f("dst"), "invalid prefix %q", s)
				continue
			}
			cl.Dst = append(cl.Dst, p.Masked())
		}
		if rcl.Scheduler == "" {
			c.errf(f(""), "missing scheduler")
		} else {
			c.name(f("scheduler"), "scheduler", rcl.Scheduler, c.names.Schedulers)
		}
		conn.Classes = append(conn.Classes, cl)
	}
}

// modes checks mode, the switch thresholds, advertise and reconnect_max.
func (c *checker) modes(rc *rawConnection, conn *Connection) {
	conn.Mode = deref(rc.Mode, ModeAggregate)
	c.oneOf(top("connection.mode"), conn.Mode, ModeAggregate, ModeActiveBackup, ModeSwitch)
	sw := &rc.Switch
	conn.Switch.RTTHigh = c.duration(top("connection.switch.rtt_high"), sw.RTTHigh, 150*time.Millisecond, time.Millisecond, time.Minute)
	conn.Switch.RTTLow = c.duration(top("connection.switch.rtt_low"), sw.RTTLow, conn.Switch.RTTHigh*2/3, time.Millisecond, time.Minute)
	if conn.Switch.RTTLow > conn.Switch.RTTHigh {
		c.errf(top("connection.switch.rtt_low"), "%v must not exceed rtt_high %v", conn.Switch.RTTLow, conn.Switch.RTTHigh)
	}
	conn.Switch.LossHigh = c.fraction(top("connection.switch.loss_high"), sw.LossHigh, 0.05)
	conn.Switch.LossLow = c.fraction(top("connection.switch.loss_low"), sw.LossLow, conn.Switch.LossHigh/4)
	if conn.Switch.LossLow > conn.Switch.LossHigh {
		c.errf(top("connection.switch.loss_low"), "%v must not exceed loss_high %v", conn.Switch.LossLow, conn.Switch.LossHigh)
	}
	conn.Switch.Hold = c.duration(top("connection.switch.hold"), sw.Hold, 2*time.Second, 0, time.Hour)
	conn.ReconnectMax = c.duration(top("connection.reconnect_max"), rc.ReconnectMax, 2*time.Second, 100*time.Millisecond, time.Hour)
	for i, s := range rc.Advertise {
		ap, err := parseAddrPort(s, DefaultPort)
		if err != nil || !ap.Addr().IsGlobalUnicast() && !ap.Addr().IsPrivate() && !ap.Addr().IsLoopback() {
			c.errf(top("connection.advertise"), "invalid address %q (entry %d): want a unicast IP or IP:port", s, i+1)
			continue
		}
		conn.Advertise = append(conn.Advertise, ap)
	}
	if len(conn.Advertise) > 0 && conn.Role != RoleServer {
		c.errf(top("connection.advertise"), "only a server advertises addresses")
	}
}

func (c *checker) fraction(a at, v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	if *v < 0 || *v > 1 || *v != *v {
		c.errf(a, "%v out of range 0..1 (a fraction: 0.05 is 5 %%)", *v)
		return def
	}
	return *v
}

func (c *checker) listens(raw *rawConfig, cfg *Config) {
	for i, rl := range raw.Listen {
		f := elem("listen", i, "")
		var l Listen
		if rl.Address == nil {
			c.errf(f(""), "missing address")
		} else if ap, err := parseAddrPort(*rl.Address, DefaultPort); err != nil {
			c.errf(f("address"), "%v", err)
		} else {
			l.Address = ap
		}
		l.Device = rl.Device
		if l.Device != "" && !validIfName(l.Device) {
			c.errf(f("device"), "invalid interface name %q", l.Device)
		}
		l.Fwmark = c.mark(f("fwmark"), rl.Fwmark)
		cfg.Listen = append(cfg.Listen, l)
	}
	for i := range cfg.Listen {
		for j := range i {
			if cfg.Listen[i].Address.IsValid() && cfg.Listen[i] == cfg.Listen[j] {
				c.errf(elem("listen", i, "")("address"), "duplicate of listen[%d]", j)
			}
		}
	}
	switch cfg.Connection.Role {
	case RoleServer:
		if len(cfg.Listen) == 0 {
			c.errf(top("listen"), "role \"server\" needs at least one [[listen]] socket")
		}
	case RoleClient:
		if len(cfg.Listen) > 0 {
			c.errf(elem("listen", 0, "")(""), "[[listen]] is for role \"server\"; a client uses [[path]]")
		}
	}
}

func (c *checker) paths(raw *rawConfig, cfg *Config) {
	names := map[string]int{}
	for i, rp := range raw.Path {
		f := elem("path", i, rp.Name)
		p := Path{Name: rp.Name, Device: rp.Device, CCID: rp.CCID}
		switch {
		case rp.Name == "":
			c.errf(f(""), "missing name")
		case !validName(rp.Name):
			c.errf(f("name"), "invalid name %q (letters, digits, '-' and '_', up to 32)", rp.Name)
		default:
			if j, dup := names[rp.Name]; dup {
				c.errf(f("name"), "duplicate path name (also path[%d])", j)
			}
			names[rp.Name] = i
		}
		if rp.Local != "" {
			ap, err := parseAddrPort(rp.Local, 0)
			if err != nil {
				c.errf(f("local"), "%v", err)
			}
			p.Local = ap
		}
		if p.Device != "" && !validIfName(p.Device) {
			c.errf(f("device"), "invalid interface name %q", p.Device)
		}
		p.Fwmark = c.mark(f("fwmark"), rp.Fwmark)
		if rp.Remote == nil {
			c.errf(f(""), "missing remote")
		} else if ap, err := parseAddrPort(*rp.Remote, DefaultPort); err != nil {
			c.errf(f("remote"), "%v", err)
		} else {
			p.Remote = ap
			if p.Local.Addr().IsValid() && p.Local.Addr().Is4() != ap.Addr().Is4() {
				c.errf(f("remote"), "address family differs from local %s", p.Local.Addr())
			}
		}
		p.Prio = uint8(c.intIn(f("prio"), rp.Prio, DefaultPrio, 0, 255))
		p.Weight = int(c.intIn(f("weight"), rp.Weight, 1, 1, 1000))
		if p.CCID != "" {
			c.name(f("ccid"), "congestion controller", p.CCID, c.names.CCIDs)
		}
		minMTU := int64(576)
		if p.Remote.Addr().Is6() {
			minMTU = 1280
		}
		p.MTU = int(c.intIn(f("mtu"), rp.MTU, DefaultPathMTU, minMTU, 65535))
		c.pathRouting(f, i, &rp, &p)
		cfg.Paths = append(cfg.Paths, p)
	}
	c.routingTables(cfg)
	switch cfg.Connection.Role {
	case RoleClient:
		if len(cfg.Paths) == 0 {
			c.errf(top("path"), "role \"client\" needs at least one [[path]]")
		}
	case RoleServer:
		if len(cfg.Paths) > 0 {
			c.errf(elem("path", 0, raw.Path[0].Name)(""), "[[path]] is for role \"client\"; a server uses [[listen]]")
		}
	}
}

func (c *checker) oneOf(a at, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		c.errf(a, "invalid value %q: want %s", v, quoteList(allowed))
	}
}

func (c *checker) name(a at, what, v string, known []string) {
	if known == nil {
		if !validName(v) {
			c.errf(a, "invalid %s name %q", what, v)
		}
		return
	}
	if !slices.Contains(known, v) {
		c.errf(a, "unknown %s %q: want %s", what, v, quoteList(known))
	}
}

func (c *checker) duration(a at, s *string, def, lo, hi time.Duration) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		c.errf(a, "invalid duration %q (e.g. \"150ms\", \"2s\")", *s)
		return def
	}
	if d < lo || d > hi {
		c.errf(a, "%v out of range %v..%v", d, lo, hi)
	}
	return d
}

func (c *checker) intIn(a at, v *int64, def, lo, hi int64) int64 {
	if v == nil {
		return def
	}
	if *v < lo || *v > hi {
		c.errf(a, "%d out of range %d..%d", *v, lo, hi)
		return def
	}
	return *v
}

func (c *checker) mark(a at, v int64) uint32 {
	if v < 0 || v > math.MaxUint32 {
		c.errf(a, "%d out of range 0..%d", v, uint32(math.MaxUint32))
		return 0
	}
	return uint32(v)
}

func (c *checker) ports(a at, list []string) []PortRange {
	var out []PortRange
	for _, s := range list {
		r, err := parsePortRange(s)
		if err != nil {
			c.errf(a, "%v", err)
			continue
		}
		out = append(out, r)
	}
	return out
}

func parsePortRange(s string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	b := a
	var err2 error
	if isRange {
		b, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	}
	if err1 != nil || err2 != nil || a == 0 || b < a {
		return PortRange{}, fmt.Errorf("invalid port or range %q (e.g. \"5060\" or \"10000-20000\")", s)
	}
	return PortRange{uint16(a), uint16(b)}, nil
}

var protocols = map[string]uint8{"any": 0, "icmp": 1, "tcp": 6, "udp": 17, "dccp": 33, "icmpv6": 58, "sctp": 132}

func parseProtocol(s string) (uint8, error) {
	if p, ok := protocols[s]; ok {
		return p, nil
	}
	if n, err := strconv.ParseUint(s, 10, 8); err == nil {
		return uint8(n), nil
	}
	return 0, fmt.Errorf("invalid protocol %q: want a number or any, tcp, udp, icmp, icmpv6, dccp, sctp", s)
}

// parseAddrPort accepts "1.2.3.4", "1.2.3.4:5", "[::1]:5" and "::1".
func parseAddrPort(s string, defPort uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a, defPort), nil
	}
	return netip.AddrPort{}, fmt.Errorf("invalid address %q (want IP or IP:port)", s)
}

// ParseRate parses a rate in bits per second: "0", "800k", "50M",
// "1.5Gbit", "100mbit". Suffixes are decimal (k=1000).
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "bps")
	t = strings.TrimSuffix(t, "bit")
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1e3, t[:n-1]
		case 'm':
			mult, t = 1e6, t[:n-1]
		case 'g':
			mult, t = 1e9, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || v*mult > 1e12 {
		return 0, fmt.Errorf("invalid rate %q (bits per second, e.g. \"0\", \"50M\", \"1.5Gbit\")", s)
	}
	return uint64(v * mult), nil
}

// minCaptureSize matches capture.MinSize.
const minCaptureSize = 64 << 10

var reName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func validName(s string) bool { return reName.MatchString(s) }

func validIfName(s string) bool {
	return len(s) > 0 && len(s) < 16 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n")
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
