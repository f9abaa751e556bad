package wire

import (
	"bytes"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
)

// update rewrites the route list in docs/api.md from the table:
// go test ./wire -run TestRoutesDoc -update (or go generate ./wire).
var update = flag.Bool("update", false, "rewrite the generated route lists in docs/api.md and README.md")

// concrete fills a pattern's parameters with names derived from them.
func concrete(pattern string) (path string, params []string) {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			segs[i] = "v-" + name
			params = append(params, "v-"+name)
		}
	}
	return strings.Join(segs, "/"), params
}

// Every route is complete, unique, and reached by its own method and path.
func TestRouteTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, r := range routes {
		require.Contains(t, []string{"GET", "POST", "DELETE"}, r.Method, r.Pattern)
		require.Contains(t, []Role{RolePublic, RoleReadOnly, RoleReadWrite, RoleAdmin}, r.Role, "%s %s", r.Method, r.Pattern)
		require.NotEmpty(t, r.Doc, "%s %s", r.Method, r.Pattern)
		require.NotContains(t, r.Doc, "\n")
		require.NotEmpty(t, r.Label())
		require.NotEqual(t, "other", r.Label())
		require.NotNil(t, r.handle, "%s %s", r.Method, r.Pattern)
		k := r.Method + " " + r.Pattern
		require.False(t, seen[k], "duplicate route %s", k)
		seen[k] = true

		path, params := concrete(r.Pattern)
		got, gotParams, _ := route(r.Method, path)
		require.Same(t, r, got, "%s %s", r.Method, path)
		require.Equal(t, params, gotParams)
		require.Equal(t, r.Label(), routeLabel(path))
		if r.params > 0 {
			got, _, _ = route(r.Method, path+"/")
			require.Same(t, r, got, "a route with parameters ignores one trailing slash: %s", path)
		}
	}
}

// Parameters are percent-decoded; literal segments match exactly.
func TestRouteParams(t *testing.T) {
	t.Parallel()
	r, p, _ := route("GET", "/api/v1/pop/queue/a%20b%2Fc/partition/p%C3%A9")
	require.Equal(t, "/api/v1/pop/queue/:queue/partition/:partition", r.Pattern)
	require.Equal(t, []string{"a b/c", "pé"}, p)
	r, _, _ = route("GET", "/api/v1/pop/queue/q/partitions/p")
	require.Nil(t, r)
	r, _, _ = route("GET", "/api/v1/pop/queue/%zz")
	require.Nil(t, r, "a bad escape matches nothing")
}

func TestRouteLabels(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/health":                            "/health",
		"/metrics/prometheus":                "/metrics/prometheus",
		"/api/v1/push":                       "/api/v1/push",
		"/api/v1/resources/queues/orders":    "/api/v1/resources/queues/:queue",
		"/api/v1/resources/queues/a%20b%2Fc": "/api/v1/resources/queues/:queue",
		"/api/v1/consumer-groups/g":          "/api/v1/consumer-groups/:group",
		"/api/v1/nope/1234":                  "other",
		"/api/v1/messages/p/t/x/y":           "other",
		"/api/v1/resources/queues//":         "other",
		"/api/v1/push/":                      "other",
		"/favicon.ico":                       "other",
		"/":                                  "other",
	} {
		require.Equal(t, want, routeLabel(path), path)
	}
}

// serve runs one request through the server's handler.
func serve(method, uri string) *fasthttp.Response {
	s := New(newNilBackend(), Config{Metrics: metrics.New(metrics.Config{})})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	s.instrumented(&ctx)
	var resp fasthttp.Response
	ctx.Response.CopyTo(&resp)
	return &resp
}

// An unknown path is 404 and a known path with the wrong method 405 (with
// Allow), both with the JSON error body; OPTIONS is the CORS preflight.
func TestRouteErrors(t *testing.T) {
	t.Parallel()
	for _, uri := range []string{"/api/v1/nope", "/api/v1/push/", "/api/v1/pop/queue/q/x", "/", "/health/x",
		"/api/v1/resources/queues//", "/api/v1/messages/p/t/undo"} {
		resp := serve("GET", uri)
		require.Equal(t, fasthttp.StatusNotFound, resp.StatusCode(), uri)
		require.JSONEq(t, `{"error":"Not Found"}`, string(resp.Body()), uri)
		require.Equal(t, "application/json", string(resp.Header.ContentType()))
		require.Equal(t, "*", string(resp.Header.Peek("Access-Control-Allow-Origin")))
	}
	for _, tc := range []struct{ method, uri, allow string }{
		{"GET", "/api/v1/push", "POST, OPTIONS"},
		{"POST", "/health", "GET, OPTIONS"},
		{"PUT", "/api/v1/resources/queues/q", "GET, DELETE, OPTIONS"},
		{"HEAD", "/api/v1/pop/queue/q", "GET, OPTIONS"}, // a pop changes state: no HEAD
		{"POST", "/api/v1/consumer-groups/g", "GET, DELETE, OPTIONS"},
		{"PUT", "/api/v1/messages/p/t", "GET, DELETE, OPTIONS"},
	} {
		resp := serve(tc.method, tc.uri)
		require.Equal(t, fasthttp.StatusMethodNotAllowed, resp.StatusCode(), "%s %s", tc.method, tc.uri)
		require.JSONEq(t, `{"error":"Method Not Allowed"}`, string(resp.Body()))
		require.Equal(t, tc.allow, string(resp.Header.Peek("Allow")), "%s %s", tc.method, tc.uri)
	}
	resp := serve("OPTIONS", "/anything/at/all")
	require.Equal(t, fasthttp.StatusNoContent, resp.StatusCode())
	require.Equal(t, "GET, POST, PUT, DELETE, OPTIONS", string(resp.Header.Peek("Access-Control-Allow-Methods")))
}

const (
	routesBegin = "<!-- routes:begin -->\n"
	routesEnd   = "<!-- routes:end -->"
)

// The route table in docs/api.md is generated from the table.
func TestRoutesDoc(t *testing.T) {
	t.Parallel()
	for file, write := range map[string]func(io.Writer){
		"../docs/api.md": WriteRoutesMarkdown,
	} {
		doc, err := os.ReadFile(file)
		require.NoError(t, err)
		i := bytes.Index(doc, []byte(routesBegin))
		j := bytes.Index(doc, []byte(routesEnd))
		require.True(t, i >= 0 && j > i, "%s must hold the markers %q and %q", file, routesBegin, routesEnd)
		var want bytes.Buffer
		write(&want)
		got := doc[i+len(routesBegin) : j]
		if *update {
			out := append(append(append([]byte{}, doc[:i+len(routesBegin)]...), want.Bytes()...), doc[j:]...)
			require.NoError(t, os.WriteFile(file, out, 0o644))
			continue
		}
		require.Equal(t, want.String(), string(got),
			"the route list in %s is out of date: run go generate ./wire", file)
	}
}
