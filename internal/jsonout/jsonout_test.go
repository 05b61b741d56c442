// SPDX-License-Identifier: MIT

package jsonout

import (
	"bytes"
	"slices"
	"testing"
)

func TestPrintIndents(t *testing.T) {
	var b bytes.Buffer
	if err := Print(&b, map[string]any{"ok": true, "n": []int{1}}); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"n\": [\n    1\n  ],\n  \"ok\": true\n}\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestStripFlag(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		on     bool
		want   []string
		wantOn bool
	}{
		{[]string{"status"}, false, []string{"status"}, false},
		{[]string{"status", "--json"}, false, []string{"status"}, true},
		{[]string{"-json", "paths", "x"}, false, []string{"paths", "x"}, true},
		{[]string{"paths"}, true, []string{"paths"}, true},
		{[]string{"--json", "--json"}, false, []string{}, true},
	} {
		in := slices.Clone(tc.args)
		got, on := StripFlag(in, tc.on)
		if !slices.Equal(got, tc.want) || on != tc.wantOn {
			t.Errorf("StripFlag(%q, %v) = %q, %v; want %q, %v", tc.args, tc.on, got, on, tc.want, tc.wantOn)
		}
		if !slices.Equal(in, tc.args) {
			t.Errorf("StripFlag changed its argument: %q", in)
		}
	}
}
