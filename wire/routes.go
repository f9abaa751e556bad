package wire

//go:generate go test -run TestRoutesDoc -update .

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"
)

// Role is the access level a route needs when authentication is on, Queen's
// levels: admin includes read-write, which includes read-only.
type Role string

// The access levels, from none to all.
const (
	// RolePublic routes need no token while their path is in
	// JWT_SKIP_PATHS, as it is by default (health and metrics); taken out
	// of it, they need a read-only token.
	RolePublic Role = "public"
	// RoleReadOnly routes read and change nothing.
	RoleReadOnly Role = "read-only"
	// RoleReadWrite routes produce, consume and configure.
	RoleReadWrite Role = "read-write"
	// RoleAdmin routes delete queues and consumer groups.
	RoleAdmin Role = "admin"
)

// Route is one endpoint of the HTTP API. The route table (routes) is the
// only place a route exists: it drives routing, the 404/405 answers, the
// metrics label, the access level and the route list in docs/api.md.
type Route struct {
	// Method is GET, POST or DELETE. A GET route that changes nothing
	// (public or read-only) also answers HEAD.
	Method string
	// Pattern is the path; a segment ":name" matches any one non-empty
	// segment, percent-decoded, and is passed to the handler. A route with
	// parameters ignores one trailing slash; a route without requires the
	// exact path.
	Pattern string
	// Role is the access level the route needs.
	Role Role
	// Doc says in one line what the route does.
	Doc string

	handle handler
	segs   []string // Pattern split at '/', without the leading empty one
	params int      // number of ":name" segments
}

// Label is the route's metrics label: its pattern (a bounded set, never a
// raw path).
func (r *Route) Label() string { return r.Pattern }

// handler serves one route; p holds the pattern's parameters in order.
type handler func(s *Server, ctx *fasthttp.RequestCtx, p []string)

// h0 adapts a handler without parameters.
func h0(f func(*Server, *fasthttp.RequestCtx)) handler {
	return func(s *Server, ctx *fasthttp.RequestCtx, _ []string) { f(s, ctx) }
}

// h1 adapts a handler of one parameter.
func h1(f func(*Server, *fasthttp.RequestCtx, string)) handler {
	return func(s *Server, ctx *fasthttp.RequestCtx, p []string) { f(s, ctx, p[0]) }
}

// h2 adapts a handler of two parameters.
func h2(f func(*Server, *fasthttp.RequestCtx, string, string)) handler {
	return func(s *Server, ctx *fasthttp.RequestCtx, p []string) { f(s, ctx, p[0], p[1]) }
}

// routes is the API. Levels follow Queen's JWT levels; routes Queen does not
// have take the level of their kind (the dedup views read only; a DLQ replay
// writes).
var routes = []*Route{
	{Method: "GET", Pattern: "/health", Role: RolePublic, Doc: "liveness and database reachability",
		handle: h0((*Server).handleHealth)},
	{Method: "GET", Pattern: "/health/live", Role: RolePublic,
		Doc:    "liveness: 200 while the process serves HTTP, whatever the database",
		handle: h0((*Server).handleLive)},
	{Method: "GET", Pattern: "/ready", Role: RolePublic,
		Doc:    "readiness: 200 when the database answers on a read-write session, the schema is migrated and no mailbox is full; else 503",
		handle: h0((*Server).handleReady)},
	{Method: "GET", Pattern: "/metrics", Role: RolePublic,
		Doc:    "JSON summary: requests, messages, pool, memory, CPU, actors, dedup cache of this broker",
		handle: h0((*Server).handleMetrics)},
	{Method: "GET", Pattern: "/metrics/prometheus", Role: RolePublic, Doc: "Prometheus text format",
		handle: h0((*Server).handlePrometheus)},
	{Method: "POST", Pattern: "/api/v1/push", Role: RoleReadWrite,
		Doc:    "push messages; deduplicated by `transactionId` per partition",
		handle: h0((*Server).handlePush)},
	{Method: "GET", Pattern: "/api/v1/pop/queue/:queue", Role: RoleReadWrite,
		Doc:    "lease a batch from any partition of a queue",
		handle: func(s *Server, ctx *fasthttp.RequestCtx, p []string) { s.handlePop(ctx, p[0], "") }},
	{Method: "GET", Pattern: "/api/v1/pop/queue/:queue/partition/:partition", Role: RoleReadWrite,
		Doc: "lease a batch from one partition", handle: h2((*Server).handlePop)},
	{Method: "POST", Pattern: "/api/v1/ack", Role: RoleReadWrite, Doc: "acknowledge one message",
		handle: h0((*Server).handleAck)},
	{Method: "POST", Pattern: "/api/v1/ack/batch", Role: RoleReadWrite, Doc: "acknowledge several messages",
		handle: h0((*Server).handleAckBatch)},
	{Method: "POST", Pattern: "/api/v1/lease/:leaseId/extend", Role: RoleReadWrite, Doc: "extend a live lease",
		handle: h1((*Server).handleExtendLease)},
	{Method: "POST", Pattern: "/api/v1/transaction", Role: RoleReadWrite,
		Doc: "pushes and acks in one PostgreSQL transaction", handle: h0((*Server).handleTransaction)},
	{Method: "POST", Pattern: "/api/v1/configure", Role: RoleReadWrite, Doc: "create or replace a queue's options",
		handle: h0((*Server).handleConfigure)},
	{Method: "GET", Pattern: "/api/v1/resources/queues", Role: RoleReadOnly, Doc: "list queues",
		handle: h0((*Server).handleListQueues)},
	{Method: "GET", Pattern: "/api/v1/resources/queues/:queue", Role: RoleReadOnly,
		Doc: "one queue with its partitions and consumer groups", handle: h1((*Server).handleQueueDetail)},
	{Method: "DELETE", Pattern: "/api/v1/resources/queues/:queue", Role: RoleAdmin,
		Doc: "delete a queue and everything in it", handle: h1((*Server).handleDeleteQueue)},
	{Method: "GET", Pattern: "/api/v1/resources/partitions", Role: RoleReadOnly,
		Doc:    "every partition with its queue and counts (`queue`, `namespace`, `task` filter)",
		handle: h0((*Server).handleListPartitions)},
	{Method: "DELETE", Pattern: "/api/v1/queues/:queue/clear", Role: RoleAdmin,
		Doc:    "501: clearing a queue's messages is not supported (Queen's server has no such route); delete the queue",
		handle: notSupported("Clearing a queue is not supported; delete the queue (DELETE /api/v1/resources/queues/:queue)")},
	{Method: "GET", Pattern: "/api/v1/pop", Role: RoleReadWrite,
		Doc:    "501: popping by namespace or task is not supported (Queen's server has no such route); pop a queue",
		handle: notSupported("Popping by namespace or task is not supported; pop a queue (GET /api/v1/pop/queue/:queue)")},
	{Method: "GET", Pattern: "/api/v1/resources/overview", Role: RoleReadOnly, Doc: "counts over the whole broker",
		handle: h0((*Server).handleOverview)},
	{Method: "GET", Pattern: "/api/v1/resources/namespaces", Role: RoleReadOnly, Doc: "queues grouped by namespace",
		handle: h0((*Server).handleNamespaces)},
	{Method: "GET", Pattern: "/api/v1/resources/tasks", Role: RoleReadOnly, Doc: "queues grouped by task",
		handle: h0((*Server).handleTasks)},
	{Method: "GET", Pattern: "/api/v1/messages", Role: RoleReadOnly, Doc: "list stored messages, newest first",
		handle: h0((*Server).handleListMessages)},
	{Method: "GET", Pattern: "/api/v1/messages/:partitionId/:transactionId", Role: RoleReadOnly,
		Doc: "one stored message", handle: h2((*Server).handleGetMessage)},
	{Method: "DELETE", Pattern: "/api/v1/messages/:partitionId/:transactionId", Role: RoleReadWrite,
		Doc:    "delete a stored message (never delivered afterwards; its transactionId stays a duplicate inside the window)",
		handle: h2((*Server).handleDeleteMessage)},
	{Method: "POST", Pattern: "/api/v1/messages/:partitionId/:transactionId/retry", Role: RoleReadWrite,
		Doc: "replay a dead letter into its partition", handle: h2((*Server).handleRetryMessage)},
	{Method: "POST", Pattern: "/api/v1/messages/:partitionId/:transactionId/dlq", Role: RoleReadWrite,
		Doc:    "501: moving a stored message to the DLQ by hand is not supported (ack it with `status: dlq`)",
		handle: notSupported("Moving a message to the dead-letter queue by hand is not supported; ack it with status \"dlq\"")},
	{Method: "GET", Pattern: "/api/v1/dlq", Role: RoleReadOnly, Doc: "list dead letters, newest first",
		handle: h0((*Server).handleDLQ)},
	{Method: "GET", Pattern: "/api/v1/consumer-groups", Role: RoleReadOnly,
		Doc:    "consumer groups: one row per group and queue, with members, lag and state",
		handle: h0((*Server).handleConsumerGroups)},
	{Method: "GET", Pattern: "/api/v1/consumer-groups/lagging", Role: RoleReadOnly,
		Doc:    "partitions whose oldest message a group has not consumed is older than `minLagSeconds`",
		handle: h0((*Server).handleLaggingGroups)},
	{Method: "GET", Pattern: "/api/v1/consumer-groups/:group", Role: RoleReadOnly,
		Doc: "one consumer group's cursors, by queue", handle: h1((*Server).handleConsumerGroup)},
	{Method: "DELETE", Pattern: "/api/v1/consumer-groups/:group", Role: RoleAdmin,
		Doc:    "delete a consumer group's cursors on every queue",
		handle: func(s *Server, ctx *fasthttp.RequestCtx, p []string) { s.handleDeleteGroup(ctx, p[0], "") }},
	{Method: "DELETE", Pattern: "/api/v1/consumer-groups/:group/queues/:queue", Role: RoleAdmin,
		Doc: "delete a consumer group's cursors on one queue", handle: h2((*Server).handleDeleteGroup)},
	{Method: "POST", Pattern: "/api/v1/consumer-groups/:group/queues/:queue/seek", Role: RoleReadWrite,
		Doc: "move a group's cursors on a queue to the end or to a time",
		handle: func(s *Server, ctx *fasthttp.RequestCtx, p []string) {
			s.seek(ctx, p[0], p[1], "", true)
		}},
	{Method: "POST", Pattern: "/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek",
		Role: RoleReadWrite, Doc: "move a group's cursor on one partition to the end",
		handle: func(s *Server, ctx *fasthttp.RequestCtx, p []string) {
			s.seek(ctx, p[0], p[1], p[2], false)
		}},
	{Method: "POST", Pattern: "/api/v1/consumer-groups/:group/subscription", Role: RoleReadWrite,
		Doc: "move a group's start point", handle: h1((*Server).handleSetSubscription)},
	{Method: "GET", Pattern: "/api/v1/status", Role: RoleReadOnly,
		Doc:    "throughput series, message counts, leases, dead letters and brokers (`from`, `to`, `queue`, `namespace`, `task`)",
		handle: h0((*Server).handleStatus)},
	{Method: "GET", Pattern: "/api/v1/status/queues", Role: RoleReadOnly, Doc: "per-queue status, paginated",
		handle: h0((*Server).handleStatusQueues)},
	{Method: "GET", Pattern: "/api/v1/status/queues/:queue", Role: RoleReadOnly,
		Doc: "one queue's status with its partitions", handle: h1((*Server).handleStatusQueue)},
	{Method: "GET", Pattern: "/api/v1/status/queues/:queue/messages", Role: RoleReadOnly,
		Doc: "a queue's stored messages, newest first (bare array)", handle: h1((*Server).handleQueueMessages)},
	{Method: "GET", Pattern: "/api/v1/status/analytics", Role: RoleReadOnly,
		Doc: "messages pushed per minute, hour or day, zero-filled", handle: h0((*Server).handleStatusAnalytics)},
	{Method: "GET", Pattern: "/api/v1/status/buffers", Role: RoleReadOnly,
		Doc:    "Queen's disk push buffer: always empty (Regina has none) and the database's health",
		handle: h0((*Server).handleBuffers)},
	{Method: "POST", Pattern: "/api/v1/stats/refresh", Role: RoleAdmin,
		Doc: "no-op: Regina computes statistics on every read", handle: h0((*Server).handleStatsRefresh)},
	{Method: "GET", Pattern: "/api/v1/analytics/queue-ops", Role: RoleReadOnly,
		Doc:    "per queue and bucket: pushes, pops, acks, empty pops, lag, partitions created, waiting long polls",
		handle: h0((*Server).handleQueueOps)},
	{Method: "GET", Pattern: "/api/v1/analytics/queue-lag", Role: RoleReadOnly,
		Doc: "delivery lag per queue and minute (bare array, newest first)", handle: h0((*Server).handleQueueLag)},
	{Method: "GET", Pattern: "/api/v1/analytics/worker-metrics", Role: RoleReadOnly,
		Doc:    "broker-wide series, the brokers of the last 5 minutes, lag per queue",
		handle: h0((*Server).handleWorkerMetrics)},
	{Method: "GET", Pattern: "/api/v1/analytics/retention", Role: RoleReadOnly,
		Doc:    "messages deleted by retention, completed retention and eviction, per bucket",
		handle: h0((*Server).handleRetentionAnalytics)},
	{Method: "GET", Pattern: "/api/v1/analytics/queue-parked-replicas", Role: RoleReadOnly,
		Doc: "waiting long polls per queue, broker and bucket", handle: h0((*Server).handleParkedReplicas)},
	{Method: "GET", Pattern: "/api/v1/analytics/system-metrics", Role: RoleReadOnly,
		Doc: "CPU, memory, pool and pipeline samples per broker and bucket", handle: h0((*Server).handleSystemMetrics)},
	{Method: "GET", Pattern: "/api/v1/analytics/postgres-stats", Role: RoleReadOnly,
		Doc:    "PostgreSQL statistics for the broker's schema: cache, vacuum, sizes, running queries",
		handle: h0((*Server).handlePostgresStats)},
	{Method: "GET", Pattern: "/api/v1/migration/status", Role: RoleAdmin,
		Doc: "Queen's database copy: always idle (not supported)", handle: h0((*Server).handleMigrationStatus)},
	{Method: "POST", Pattern: "/api/v1/migration/test-connection", Role: RoleAdmin,
		Doc: "501: Regina does not copy databases", handle: notSupported("migration is not supported")},
	{Method: "POST", Pattern: "/api/v1/migration/start", Role: RoleAdmin,
		Doc: "501: Regina does not copy databases", handle: notSupported("migration is not supported")},
	{Method: "POST", Pattern: "/api/v1/migration/validate", Role: RoleAdmin,
		Doc: "501: Regina does not copy databases", handle: notSupported("migration is not supported")},
	{Method: "POST", Pattern: "/api/v1/migration/reset", Role: RoleAdmin,
		Doc: "501: Regina does not copy databases", handle: notSupported("migration is not supported")},
	{Method: "POST", Pattern: "/api/v1/traces", Role: RoleReadWrite,
		Doc: "record a trace event on a stored message", handle: h0((*Server).handleAddTrace)},
	// by-name before :partitionId/:transactionId: the literal segment wins.
	{Method: "GET", Pattern: "/api/v1/traces/by-name/:name", Role: RoleReadOnly,
		Doc: "trace events carrying a name, oldest first, with their messages", handle: h1((*Server).handleTracesByName)},
	{Method: "GET", Pattern: "/api/v1/traces/names", Role: RoleReadOnly,
		Doc: "trace names, most recently seen first", handle: h0((*Server).handleTraceNames)},
	{Method: "GET", Pattern: "/api/v1/traces/:partitionId/:transactionId", Role: RoleReadOnly,
		Doc: "every trace event of one message, oldest first", handle: h2((*Server).handleTracesOfMessage)},
	{Method: "GET", Pattern: "/api/v1/system/maintenance", Role: RoleAdmin,
		Doc:    "both maintenance switches (shared by every broker on the database)",
		handle: h0((*Server).handleGetMaintenance)},
	{Method: "POST", Pattern: "/api/v1/system/maintenance", Role: RoleAdmin,
		Doc:    "`{\"enabled\":bool}`: push maintenance on or off (pushes refused with a retryable 503)",
		handle: h0((*Server).handleSetMaintenance)},
	{Method: "GET", Pattern: "/api/v1/system/maintenance/pop", Role: RoleAdmin, Doc: "the pop maintenance switch",
		handle: h0((*Server).handleGetPopMaintenance)},
	{Method: "POST", Pattern: "/api/v1/system/maintenance/pop", Role: RoleAdmin,
		Doc:    "`{\"enabled\":bool}`: pop maintenance on or off (pops answer 204, empty)",
		handle: h0((*Server).handleSetPopMaintenance)},
	{Method: "GET", Pattern: "/api/v1/dedup/explain", Role: RoleReadOnly,
		Doc: "what a push of one transaction id would get now, and why", handle: h0((*Server).handleDedupExplain)},
	{Method: "POST", Pattern: "/api/v1/dedup/lookup", Role: RoleReadOnly,
		Doc: "which of a batch of transaction ids are stored (reads only)", handle: h0((*Server).handleDedupLookup)},
	{Method: "POST", Pattern: "/api/v1/stream/define", Role: RoleReadWrite,
		Doc:    "501: Queen's legacy stream API is not supported; use /streams/v1",
		handle: notSupported("The legacy stream API is not supported; use /streams/v1 (docs/streams.md)")},
	{Method: "POST", Pattern: "/api/v1/stream/poll", Role: RoleReadWrite,
		Doc:    "501: Queen's legacy stream API is not supported; use /streams/v1",
		handle: notSupported("The legacy stream API is not supported; use /streams/v1 (docs/streams.md)")},
	{Method: "POST", Pattern: "/api/v1/stream/ack", Role: RoleReadWrite,
		Doc:    "501: Queen's legacy stream API is not supported; use /streams/v1",
		handle: notSupported("The legacy stream API is not supported; use /streams/v1 (docs/streams.md)")},
	{Method: "POST", Pattern: "/api/v1/stream/renew-lease", Role: RoleReadWrite,
		Doc:    "501: Queen's legacy stream API is not supported; use /streams/v1",
		handle: notSupported("The legacy stream API is not supported; use /streams/v1 (docs/streams.md)")},
	{Method: "POST", Pattern: "/api/v1/stream/seek", Role: RoleReadWrite,
		Doc:    "501: Queen's legacy stream API is not supported; use /streams/v1",
		handle: notSupported("The legacy stream API is not supported; use /streams/v1 (docs/streams.md)")},
	{Method: "POST", Pattern: "/streams/v1/queries", Role: RoleReadWrite,
		Doc:    "register a stream query by name; 409 when its `config_hash` changed without `reset`",
		handle: h0((*Server).handleStreamQuery)},
	{Method: "POST", Pattern: "/streams/v1/cycle", Role: RoleReadWrite,
		Doc:    "commit a stream cycle: state ops, sink pushes and the source ack in one transaction",
		handle: h0((*Server).handleCycle)},
	{Method: "POST", Pattern: "/streams/v1/state/get", Role: RoleReadOnly,
		Doc: "read a stream query's state for one source partition", handle: h0((*Server).handleStateGet)},
}

// Routes returns a copy of the route table, in the order docs/api.md lists
// it.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, r := range routes {
		out[i] = *r
		out[i].handle, out[i].segs = nil, nil
	}
	return out
}

// exact maps the paths of routes without parameters to their routes.
var exact = map[string][]*Route{}

func init() {
	for _, r := range routes {
		r.segs = strings.Split(strings.TrimPrefix(r.Pattern, "/"), "/")
		for _, s := range r.segs {
			if strings.HasPrefix(s, ":") {
				r.params++
			}
		}
		if r.params == 0 {
			exact[r.Pattern] = append(exact[r.Pattern], r)
		}
	}
}

// match returns the routes whose pattern matches path, whatever their
// method, in table order.
func match(path string) []*Route {
	if rs, ok := exact[path]; ok {
		return rs
	}
	if len(path) < 2 || path[0] != '/' {
		return nil
	}
	segs := strings.Split(strings.TrimSuffix(path[1:], "/"), "/")
	var out []*Route
	for _, r := range routes {
		if r.params > 0 && len(r.segs) == len(segs) {
			if _, ok := r.bind(segs); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// bind matches a path's segments against the pattern's and returns the
// parameters, percent-decoded. Every segment must be non-empty.
func (r *Route) bind(segs []string) ([]string, bool) {
	var p []string
	for i, want := range r.segs {
		got := segs[i]
		if got == "" {
			return nil, false
		}
		if !strings.HasPrefix(want, ":") {
			if got != want {
				return nil, false
			}
			continue
		}
		v, err := url.PathUnescape(got)
		if err != nil || v == "" {
			return nil, false
		}
		p = append(p, v)
	}
	return p, true
}

// allows reports whether the route serves method.
func (r *Route) allows(method string) bool {
	if method == r.Method {
		return true
	}
	return method == "HEAD" && r.Method == http.MethodGet && (r.Role == RolePublic || r.Role == RoleReadOnly)
}

// route finds the route for a request and its parameters; candidates are
// the routes matching the path whatever their method (for the 405 answer).
func route(method, path string) (r *Route, params []string, candidates []*Route) {
	candidates = match(path)
	for _, c := range candidates {
		if c.allows(method) {
			if c.params > 0 {
				params, _ = c.bind(strings.Split(strings.TrimSuffix(path[1:], "/"), "/"))
			}
			return c, params, candidates
		}
	}
	return nil, nil, candidates
}

// routeLabel is the metrics label of a request path: the pattern of the
// first route matching it (whatever the method), "other" when none does.
func routeLabel(path string) string {
	if cs := match(path); len(cs) > 0 {
		return cs[0].Label()
	}
	return "other"
}

// WriteRoutesMarkdown writes the route table as the Markdown table of
// docs/api.md (method, path, access level, what it does).
func WriteRoutesMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| Method | Path | Access | Meaning |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, r := range routes {
		fmt.Fprintf(w, "| `%s` | `%s` | %s | %s |\n", r.Method, r.Pattern, r.Role, r.Doc)
	}
}
