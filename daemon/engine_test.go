// SPDX-License-Identifier: MIT

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/mpdccp"
)

func load(t *testing.T, text string) *config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "d.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(p, Names())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const minimal = `[tunnel]
addresses = ["10.99.0.2/24"]
[connection]
role = "client"
security = "none"
%s
[[path]]
name = "a"
remote = "192.0.2.1"
`

// The controller options of [connection] reach every path's controller
// configuration, and the engine accepts the result.
func TestEngineConfigCarriesControllerOptions(t *testing.T) {
	cfg := load(t, strings.Replace(minimal, "%s", "ccid = \"ccid2\"\nhystart = true\nabe = true\necn = false\ninitial_window = 16\nrate_limit = \"40M\"\nack_filter = false", 1))
	ec, err := engineConfig(cfg, 1400)
	if err != nil {
		t.Fatal(err)
	}
	if ec.CCID != "ccid2" || !ec.CC.HyStart || !ec.CC.ABE || ec.ECN || ec.CC.InitialWindow != 16 || ec.ACKFilter ||
		ec.CC.MSS != 1400 || ec.CC.RateLimit != 40e6 || ec.MaxPacket != 1400 {
		t.Errorf("engine config %+v", ec)
	}
	if _, err := mpdccp.NewEndpoint(ec); err != nil {
		t.Fatal(err)
	}
}

// Absent keys give the engine the product defaults.
func TestEngineConfigDefaults(t *testing.T) {
	ec, err := engineConfig(load(t, strings.Replace(minimal, "%s", "", 1)), 1400)
	if err != nil {
		t.Fatal(err)
	}
	if ec.CCID != defaults.CCID || ec.Scheduler != defaults.Scheduler || ec.Reorderer != defaults.Reorderer ||
		ec.CC.HyStart != defaults.HyStart || ec.CC.ABE != defaults.ABE || ec.ECN != defaults.ECN ||
		ec.Retransmit != defaults.Retransmit || ec.AQM == nil || ec.AQM.Disabled == defaults.AQM ||
		ec.AQM.Target != defaults.AQMTarget || ec.Reorder.BufferLimit != defaults.ReorderBuffer || ec.ACKFilter != defaults.ACKFilter {
		t.Errorf("engine config %+v", ec)
	}
}
