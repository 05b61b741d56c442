// SPDX-License-Identifier: MIT

package config

import (
	"strconv"
	"strings"
)

// lineIndex maps keys to the line where they are defined. BurntSushi/toml
// keeps key positions private, so errors found after decoding (bad values,
// unknown keys) locate their key by scanning the text here. Keys inside
// arrays of tables carry their index: "path[1].remote". A table header is
// indexed under the table's own key ("path[1]").
//
// The scanner understands what our schema uses (tables, arrays of tables,
// dotted and quoted keys, multi-line arrays and strings); for anything
// else it degrades to the nearest enclosing table.
type lineIndex struct {
	lines map[string]int
	// order lists keys with the array index removed ("path.bogus"), in file
	// order, so that the n-th undecoded "path.bogus" finds the n-th line.
	order []indexedKey
}

type indexedKey struct {
	plain   string // "path.bogus"
	indexed string // "path[1].bogus"
	line    int
}

func newLineIndex(text string) *lineIndex {
	idx := &lineIndex{lines: map[string]int{}}
	counts := map[string]int{} // array-of-tables name -> elements seen
	var prefix, plainPrefix string
	var inMulti string // closing delimiter of a multi-line string, if inside one
	depth := 0         // bracket depth of a multi-line array value

	for n, raw := range strings.Split(text, "\n") {
		lineNo := n + 1
		line := raw
		if inMulti != "" {
			if i := strings.Index(line, inMulti); i >= 0 {
				line = line[i+3:]
				inMulti = ""
			} else {
				continue
			}
		}
		if depth > 0 {
			depth, inMulti = scanValue(line, depth)
			continue
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#':
			continue
		case strings.HasPrefix(line, "[["):
			end := strings.Index(line, "]]")
			if end < 0 {
				continue
			}
			name := joinKey(splitKey(line[2:end]))
			i := counts[name]
			counts[name] = i + 1
			// Nested arrays of tables hang off the current element of
			// their parent, e.g. connection.class[0].
			plainPrefix = name
			prefix = indexedName(idx, counts, name) + "[" + strconv.Itoa(i) + "]"
			idx.add(plainPrefix, prefix, lineNo)
		case line[0] == '[':
			end := strings.Index(line, "]")
			if end < 0 {
				continue
			}
			name := joinKey(splitKey(line[1:end]))
			plainPrefix = name
			prefix = indexedName(idx, counts, name)
			idx.add(plainPrefix, prefix, lineNo)
		default:
			eq := keyEnd(line)
			if eq < 0 {
				continue
			}
			k := joinKey(splitKey(line[:eq]))
			idx.add(join(plainPrefix, k), join(prefix, k), lineNo)
			depth, inMulti = scanValue(line[eq+1:], 0)
		}
	}
	return idx
}

// indexedName rewrites a table name so that parts naming an array of
// tables point at its latest element: "connection.class" stays as is when
// "connection" is a plain table.
func indexedName(idx *lineIndex, counts map[string]int, name string) string {
	parts := strings.Split(name, ".")
	out := make([]string, 0, len(parts))
	for i := range parts {
		out = append(out, parts[i])
		if i == len(parts)-1 {
			break
		}
		if c := counts[strings.Join(parts[:i+1], ".")]; c > 0 {
			out[len(out)-1] += "[" + strconv.Itoa(c-1) + "]"
		}
	}
	return strings.Join(out, ".")
}

func (idx *lineIndex) add(plain, indexed string, line int) {
	if _, ok := idx.lines[indexed]; !ok {
		idx.lines[indexed] = line
	}
	idx.order = append(idx.order, indexedKey{plain, indexed, line})
}

// line finds key or, failing that, its nearest enclosing table.
func (idx *lineIndex) line(key string) int {
	for key != "" {
		if l, ok := idx.lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

// nth finds the n-th (0-based) occurrence of a key given without array
// indexes, as MetaData.Undecoded reports them.
func (idx *lineIndex) nth(plain string, n int) (indexedKey, bool) {
	for _, k := range idx.order {
		if k.plain == plain {
			if n == 0 {
				return k, true
			}
			n--
		}
	}
	return indexedKey{}, false
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// keyEnd returns the index of the '=' ending the key part of a key/value
// line, skipping quoted key parts.
func keyEnd(line string) int {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '=':
			return i
		case c == '#':
			return -1
		}
	}
	return -1
}

// splitKey splits a dotted key, removing quotes and blanks.
func splitKey(s string) []string {
	var parts []string
	var cur strings.Builder
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		case c == ' ' || c == '\t':
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}

func joinKey(parts []string) string { return strings.Join(parts, ".") }

// scanValue tracks brackets and multi-line strings across a value so that
// lines inside a multi-line array or string are not taken for keys.
func scanValue(s string, depth int) (int, string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '#':
			return depth, ""
		case '[', '{':
			depth++
		case ']', '}':
			if depth > 0 {
				depth--
			}
		case '"', '\'':
			if strings.HasPrefix(s[i:], `"""`) || strings.HasPrefix(s[i:], `'''`) {
				delim := s[i : i+3]
				end := strings.Index(s[i+3:], delim)
				if end < 0 {
					return depth, delim
				}
				i += 3 + end + 2
				continue
			}
			end := i + 1
			for end < len(s) && s[end] != c {
				if c == '"' && s[end] == '\\' {
					end++
				}
				end++
			}
			i = end
		}
	}
	return depth, ""
}
