package main

import (
	"bytes"
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/auth"
	"github.com/regina-mq/regina/internal/crypt"
)

// helpText is what regina -h prints.
func helpText(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	_, err := LoadConfig([]string{"-h"}, configTestEnv(nil), &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	return out.String()
}

// TestHelpListsEverySetting keeps regina -h complete: every exported Config
// field is a setting of the table (or, for Auth and EncryptionKey, of
// auth.Settings and crypt.KeyEnv), every setting is shown in a known group
// with its flag, type, variable and default, and every variable LoadConfig
// reads is named in the help. A setting added without an entry fails here.
func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	help := helpText(t)

	// Every exported Config field has an entry.
	var c Config
	fields := make(map[any]string)
	for i := range settings {
		s := &settings[i]
		fields[s.field(&c)] = s.env
	}
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		switch f.Name {
		case "Auth": // auth.Settings, kept complete by auth's TestSettingsDescribeFromEnv
			continue
		case "EncryptionKey":
			require.Contains(t, help, "  "+crypt.KeyEnv+" string\n")
			continue
		}
		_, ok := fields[v.Field(i).Addr().Interface()]
		require.True(t, ok, "Config.%s is not in the settings table: give it a variable, a flag, a group and a help line", f.Name)
	}

	// Every entry is shown, in a group the help lists, with a help line.
	for i := range settings {
		s := &settings[i]
		require.True(t, slices.Contains(groupOrder, s.group), "%s: group %q is not in groupOrder", s.env, s.group)
		require.NotEmpty(t, s.help, s.env)
	}
	for g, entries := range helpEntries() {
		require.True(t, slices.Contains(groupOrder, g), "group %q is not in groupOrder", g)
		section := helpSection(t, help, g)
		for _, e := range entries {
			head := e.env + " " + e.typ
			if e.flag != "" {
				head = "-" + e.flag + " " + e.typ + " (" + e.env
			}
			if e.def != "" {
				head += ", default " + e.def
				if e.flag == "" {
					head = e.env + " " + e.typ + " (default " + e.def
				}
			}
			require.Contains(t, section, "\n  "+head, "%s is not shown in group %s", e.env, g)
		}
	}
	for _, a := range auth.Settings {
		require.Contains(t, helpSection(t, help, groupAuth), "\n  "+a.Env+" ")
	}

	// Every variable LoadConfig reads is named.
	read := make(map[string]bool)
	_, err := LoadConfig(nil, func(k string) string { read[k] = true; return "" }, &bytes.Buffer{})
	require.NoError(t, err)
	require.Contains(t, read, "PORT", "the recorder saw the reads")
	for k := range read {
		require.Regexp(t, `\n  (-\S+ \S+ \(`+k+`[,)]|`+k+` )`, help, "LoadConfig reads %s, which the help does not list", k)
	}
}

// helpSection is the part of the help under the heading of group g.
func helpSection(t *testing.T, help, g string) string {
	t.Helper()
	_, rest, ok := strings.Cut(help, "\n"+g)
	require.True(t, ok, "no heading %q in the help", g)
	sec, _, _ := strings.Cut(rest, "\n\n")
	return sec
}

// The help shows the types the values are read as: a number is not a string.
func TestHelpShowsTypes(t *testing.T) {
	t.Parallel()
	help := helpText(t)
	for _, want := range []string{
		"-port int (PORT, default 6632)", "-dedup-cache bool (QUEEN_DEDUP_CACHE, default true)",
		"-shutdown-timeout ms (SHUTDOWN_TIMEOUT, default 30000)", "-log-level string (LOG_LEVEL, default info)",
		"JWT_CLOCK_SKEW seconds|duration (default 30s)",
	} {
		require.Contains(t, help, "\n  "+want+"\n")
	}
}
