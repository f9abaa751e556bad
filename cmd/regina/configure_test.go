package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Configure accepts keys it does not know (as upstream does) but says so: the
// answer lists them and the broker logs one warning per call. A typo of an
// option is the case that matters: configure is a full replace, so the
// option it meant fell back to its default.
func TestConfigureReportsIgnoredKeys(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	b := startBrokerLog(t, "", nil, logs)

	// A clean call: no ignoredOptions or ignoredFields field at all, no warning.
	status, body := do(t, "POST", b.URL+"/api/v1/configure",
		`{"queue":"orders","namespace":"shop","task":null,"options":{"dedupWindowSeconds":86400,"leaseTime":60}}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var clean map[string]any
	require.NoError(t, json.Unmarshal(body, &clean))
	require.NotContains(t, clean, "ignoredOptions")
	require.NotContains(t, clean, "ignoredFields")
	require.InDelta(t, 86400, clean["options"].(map[string]any)["dedupWindowSeconds"], 0)
	require.NotContains(t, logs.String(), "unknown keys ignored")

	// A typo: accepted, the window reset to its default, and the answer
	// names the key that was not read.
	status, body = do(t, "POST", b.URL+"/api/v1/configure",
		`{"queue":"orders","options":{"dedupWindowSecs":86400,"leaseTime":60,"ttlSeconds":5}}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var typo struct {
		Configured     bool             `json:"configured"`
		Options        map[string]any   `json:"options"`
		IgnoredOptions []string         `json:"ignoredOptions"`
		IgnoredFields  *json.RawMessage `json:"ignoredFields"`
	}
	require.NoError(t, json.Unmarshal(body, &typo))
	require.True(t, typo.Configured)
	require.Equal(t, []string{"dedupWindowSecs", "ttlSeconds"}, typo.IgnoredOptions)
	require.Nil(t, typo.IgnoredFields)
	require.InDelta(t, 3600, typo.Options["dedupWindowSeconds"], 0)
	require.InDelta(t, 60, typo.Options["leaseTime"], 0)

	// A misspelt top level ("option"): every option took its default.
	status, body = do(t, "POST", b.URL+"/api/v1/configure", `{"queue":"orders","option":{"leaseTime":60}}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var top struct {
		Options        map[string]any   `json:"options"`
		IgnoredFields  []string         `json:"ignoredFields"`
		IgnoredOptions *json.RawMessage `json:"ignoredOptions"`
	}
	require.NoError(t, json.Unmarshal(body, &top))
	require.Equal(t, []string{"option"}, top.IgnoredFields)
	require.Nil(t, top.IgnoredOptions)
	require.InDelta(t, 300, top.Options["leaseTime"], 0)

	// What the queue holds now is what the last answer said.
	status, body = do(t, "GET", b.URL+"/api/v1/resources/queues/orders", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var detail struct {
		DedupWindowSeconds int `json:"dedupWindowSeconds"`
	}
	require.NoError(t, json.Unmarshal(body, &detail))
	require.Equal(t, 3600, detail.DedupWindowSeconds)

	// One structured warning per call that ignored something, naming the
	// queue and the keys; none for the clean call.
	var warnings []map[string]any
	for line := range strings.Lines(logs.String()) {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "%s", line)
		if msg, _ := ev["message"].(string); strings.Contains(msg, "unknown keys ignored") {
			warnings = append(warnings, ev)
		}
	}
	require.Len(t, warnings, 2)
	require.Equal(t, "warn", warnings[0]["level"])
	require.Equal(t, "orders", warnings[0]["queue"])
	require.Equal(t, []any{"dedupWindowSecs", "ttlSeconds"}, warnings[0]["ignored_options"])
	require.Equal(t, []any{"option"}, warnings[1]["ignored_fields"])
}
