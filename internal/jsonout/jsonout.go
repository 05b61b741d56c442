// SPDX-License-Identifier: MIT

// Package jsonout is the commands' --json convention: the flag is
// accepted anywhere after the command, and results are printed as
// indented JSON.
package jsonout

import (
	"encoding/json"
	"io"
)

// StripFlag removes every --json (or -json) from args and reports whether
// there was one; on is the answer when there was none.
func StripFlag(args []string, on bool) ([]string, bool) {
	out := args[:0:0]
	for _, a := range args {
		if a == "--json" || a == "-json" {
			on = true
			continue
		}
		out = append(out, a)
	}
	return out, on
}

// Print writes v as JSON indented by two spaces, with a final newline.
func Print(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
