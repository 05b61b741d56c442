// SPDX-License-Identifier: MIT

package metrics

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"strings"
)

// Metric types of the text format.
const (
	counter   = "counter"
	gauge     = "gauge"
	histogram = "histogram"
)

// ContentType is the text exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// textWriter writes the Prometheus text exposition format (version
// 0.0.4): a HELP and a TYPE line per family, then one line per sample.
// The first write error sticks.
type textWriter struct {
	w   *bufio.Writer
	err error
}

func newTextWriter(w io.Writer) *textWriter { return &textWriter{w: bufio.NewWriter(w)} }

func (t *textWriter) str(s string) {
	if t.err == nil {
		_, t.err = t.w.WriteString(s)
	}
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

func (t *textWriter) header(name, help, typ string) {
	t.str("# HELP " + name + " " + helpEscaper.Replace(help) + "\n# TYPE " + name + " " + typ + "\n")
}

// sample writes name{labels...} value; labels alternate names and values.
func (t *textWriter) sample(name string, v float64, labels ...string) {
	t.str(name)
	if len(labels) > 0 {
		t.str("{")
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				t.str(",")
			}
			t.str(labels[i] + `="` + labelEscaper.Replace(labels[i+1]) + `"`)
		}
		t.str("}")
	}
	t.str(" " + formatValue(v) + "\n")
}

// flush writes out what is buffered and returns the first error.
func (t *textWriter) flush() error {
	if t.err == nil {
		t.err = t.w.Flush()
	}
	return t.err
}

// single writes a family with one unlabelled sample.
func (t *textWriter) single(name, help, typ string, v float64) {
	t.header(name, help, typ)
	t.sample(name, v)
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
