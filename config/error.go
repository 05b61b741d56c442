// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"fmt"
	"strings"
)

// Error is one problem in a config file: a syntax error, an unknown key, a
// value of the wrong type or a bad value. Line is 1-based, 0 if unknown.
type Error struct {
	File string
	Line int
	Key  string // dotted key as the user wrote it, e.g. "path.dsl.remote"
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one file, in file order. Load returns
// it for any content problem, so errors.As(err, new(*Error)) and IsInvalid
// tell a bad config (exit code 2) from an I/O failure.
type ErrorList []*Error

func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find each *Error.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// IsInvalid reports whether err means the config content is wrong (as
// opposed to, say, the file being unreadable).
func IsInvalid(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
