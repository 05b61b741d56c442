// SPDX-License-Identifier: MIT

package scenario

import (
	"strings"
	"testing"
	"time"
)

func TestRepeatingEventsExpand(t *testing.T) {
	sc, err := Parse([]byte(`name = "f"
duration = "20s"
[[path]]
name = "a"
[[event]]
at = "10s"
path = "a"
action = "link_down"
every = "4s"
[[event]]
at = "12s"
path = "a"
action = "link_up"
every = "4s"
until = "17s"
[[event]]
at = "5s"
action = "restart_server"
down = "1s"
`))
	if err != nil {
		t.Fatal(err)
	}
	evs := expandEvents(sc.Events, sc.Duration)
	var got []string
	for _, e := range evs {
		got = append(got, e.Action+"@"+e.At.D().String())
	}
	want := "restart_server@5s link_down@10s link_up@12s link_down@14s link_up@16s link_down@18s"
	if strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
	if evs[0].Down.D() != time.Second {
		t.Errorf("down %v", evs[0].Down.D())
	}
}

func TestHealEventErrors(t *testing.T) {
	head := "name = \"f\"\nduration = \"20s\"\n[[path]]\nname = \"a\"\n"
	for ev, want := range map[string]string{
		"at = \"1s\"\naction = \"restart_server\"\npath = \"a\"":                         "restart_server takes no path",
		"at = \"1s\"\naction = \"readdress\"":                                            `path "": no such path`,
		"at = \"1s\"\naction = \"readdress\"\npath = \"a\"\naddress = \"x\"":             `address "x"`,
		"at = \"1s\"\naction = \"restart_server\"\nsignal = \"hup\"":                     `signal "hup"`,
		"at = \"1s\"\naction = \"link_down\"\npath = \"a\"\nevery = \"1ms\"":             "every 1ms",
		"at = \"1s\"\naction = \"explode\"\npath = \"a\"":                                "restart_server, restart_client, tunnel_set or tunnel_reload",
		"at = \"1s\"\naction = \"tunnel_set\"":                                           "params are for tunnel_set and tunnel_reload",
		"at = \"1s\"\naction = \"tunnel_set\"\nside = \"cpe\"\nparams = {hold = \"1s\"}": `side "cpe"`,
	} {
		_, err := Parse([]byte(head + "[[event]]\n" + ev + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", ev, err, want)
		}
	}
	if _, err := Parse([]byte(head + "[tunnel]\nremote_path = \"b\"\n")); err == nil || !strings.Contains(err.Error(), "remote_path") {
		t.Errorf("remote_path to a missing path: %v", err)
	}
}

func TestSetKeyInConfig(t *testing.T) {
	text := "[tunnel]\nname = \"mptun0\"\n\n[connection]\nrole = \"client\"\nscheduler = \"rr\"\n\n[[connection.class]]\nscheduler = \"rr\"\n\n[log]\nlevel = \"info\"\n"
	out, err := setKey(text, "connection.scheduler", tomlValue("srtt"))
	if err != nil {
		t.Fatal(err)
	}
	out, err = setKey(out, "connection.reorder_max_hold", tomlValue("150ms"))
	if err != nil {
		t.Fatal(err)
	}
	out, err = setKey(out, "connection.retransmit", tomlValue("true"))
	if err != nil {
		t.Fatal(err)
	}
	want := "[tunnel]\nname = \"mptun0\"\n\n[connection]\nretransmit = true\nreorder_max_hold = \"150ms\"\nrole = \"client\"\nscheduler = \"srtt\"\n\n[[connection.class]]\nscheduler = \"rr\"\n\n[log]\nlevel = \"info\"\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := setKey(text, "nosuch.key", "1"); err == nil {
		t.Error("missing table accepted")
	}
}
