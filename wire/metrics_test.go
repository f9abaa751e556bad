package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRouteTemplates(t *testing.T) {
	for path, want := range map[string]string{
		"/health":                                              "/health",
		"/metrics/prometheus":                                  "/metrics/prometheus",
		"/api/v1/push":                                         "/api/v1/push",
		"/api/v1/resources/queues/orders":                      "/api/v1/resources/queues/:queue",
		"/api/v1/resources/queues/a%20b%2Fc":                   "/api/v1/resources/queues/:queue",
		"/api/v1/pop/queue/q":                                  "/api/v1/pop/queue/:queue",
		"/api/v1/pop/queue/q/partition/p":                      "/api/v1/pop/queue/:queue/partition/:partition",
		"/api/v1/lease/x/extend":                               "/api/v1/lease/:leaseId/extend",
		"/api/v1/messages/p/t":                                 "/api/v1/messages/:partitionId/:transactionId",
		"/api/v1/messages/p/t/retry":                           "/api/v1/messages/:partitionId/:transactionId/retry",
		"/api/v1/consumer-groups/g":                            "/api/v1/consumer-groups/:group",
		"/api/v1/consumer-groups/g/queues/q":                   "/api/v1/consumer-groups/:group/queues/:queue",
		"/api/v1/consumer-groups/g/queues/q/partitions/p/seek": "/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek",
		"/api/v1/status/queues/q":                              "/api/v1/status/queues/:queue",
		"/api/v1/dedup/explain":                                "/api/v1/dedup/explain",
		"/api/v1/nope/1234":                                    "other",
		"/api/v1/messages/p/t/x/y":                             "other",
		"/api/v1/resources/queues//":                           "other",
		"/favicon.ico":                                         "other",
	} {
		require.Equal(t, want, routeTemplate(path), path)
	}
}
