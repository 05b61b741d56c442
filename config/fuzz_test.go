// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// FuzzParse checks that no input panics and that every failure is an
// ErrorList of positioned errors.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"cpe.toml", "concentrator.toml"} {
		b, err := os.ReadFile(filepath.Join("..", "configs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(base))
	f.Add([]byte("[[path]]\n[[path]]\nname=1\n[connection]\nrole='server'\n[[listen]]\naddress=\"[::]:1\"\n"))
	f.Add([]byte("a = \"\"\"\n[x]\n\"\"\"\n[[connection.class]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.toml", "/etc/mptun/f.toml", data, Names{})
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			return
		}
		var list ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Fatalf("error is not an ErrorList: %T %v", err, err)
		}
		for _, e := range list {
			if e.File != "f.toml" || e.Msg == "" {
				t.Fatalf("bad error %#v", e)
			}
		}
	})
}

// TestEveryKeyDocumented walks the schema and checks that each key appears
// in the example configs, which are its documentation.
func TestEveryKeyDocumented(t *testing.T) {
	var docs strings.Builder
	for _, name := range []string{"cpe.toml", "concentrator.toml"} {
		b, err := os.ReadFile(filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	text := docs.String()
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key := f.Tag.Get("toml")
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if !strings.Contains(text, "["+prefix+key+"]") && !strings.Contains(text, "[["+prefix+key+"]]") {
					t.Errorf("table [%s%s] not in configs/*.toml", prefix, key)
				}
				walk(prefix+key+".", ft)
				continue
			}
			if !regexp.MustCompile(`(?m)\b` + key + ` = `).MatchString(text) {
				t.Errorf("key %s%s not documented in configs/*.toml", prefix, key)
			}
		}
	}
	walk("", reflect.TypeOf(rawConfig{}))
}
