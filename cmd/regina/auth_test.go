package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/auth"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/wire"
)

var (
	authSecret = []byte("regina-test-secret-of-32-bytes!!")
	authRSA    = authKey()
	authOther  = authKey()
)

func authKey() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

func authPubPEM(t *testing.T) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&authRSA.PublicKey)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

const (
	authIssuer   = "https://idp.test"
	authAudience = "regina"
)

// startAuthBroker starts a broker with auth on: HS256 (authSecret) and
// RS256 (authRSA's public key), an issuer and an audience.
func startAuthBroker(t *testing.T, mutate func(*auth.Config)) *testBroker {
	t.Helper()
	return startBroker(t, "", func(c *Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = authSecret
		c.Auth.PublicKey = authPubPEM(t)
		c.Auth.Issuer = authIssuer
		c.Auth.Audience = authAudience
		if mutate != nil {
			mutate(&c.Auth)
		}
	})
}

// claims are valid claims for the test broker with these roles and sub.
func claims(sub string, roles ...string) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"sub": sub, "iss": authIssuer, "aud": authAudience,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if len(roles) == 1 {
		c["role"] = roles[0]
	} else if len(roles) > 1 {
		c["roles"] = roles
	}
	return c
}

func token(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	require.NoError(t, err)
	return s
}

func hsToken(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	return token(t, jwt.SigningMethodHS256, authSecret, claims(sub, roles...))
}

// doAuth is do with an Authorization header ("" sends none) and the
// headers Queen's Go client sends.
func doAuth(t *testing.T, method, u, authorization string, body any) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		b, err := json.Marshal(v)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out, resp.Header
}

// requireRefused checks a refusal's status and documented body.
func requireRefused(t *testing.T, status int, body []byte, hdr http.Header, wantStatus int, wantMsg, what string) {
	t.Helper()
	require.Equal(t, wantStatus, status, "%s: %s", what, body)
	require.JSONEq(t, `{"error":"`+wantMsg+`"}`, string(body), what)
	if wantStatus == http.StatusUnauthorized {
		require.Equal(t, `Bearer realm="regina"`, hdr.Get("WWW-Authenticate"), what)
	}
}

// fingerprint summarises every table a request could change.
func (d *db) fingerprint(t *testing.T) string {
	t.Helper()
	var out string
	err := d.pool.QueryRow(t.Context(), d.q(`SELECT concat_ws('|',
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.queues x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.partitions x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.segments x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.log_txns x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.consumers x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.consumer_groups x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.dlq x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.streams_queries x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.streams_state x),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM queen.maintenance x))`)).Scan(&out)
	require.NoError(t, err)
	return out
}

// TestAuthHostileTokensWriteNothing: every hostile token on a push is
// refused with the documented status and body, and nothing is stored.
func TestAuthHostileTokensWriteNothing(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t, nil)
	d := newDB(t, b.Schema)
	pubPEM := authPubPEM(t)
	now := time.Now()
	with := func(mut func(jwt.MapClaims)) string {
		c := claims("svc", "admin")
		mut(c)
		return "Bearer " + token(t, jwt.SigningMethodHS256, authSecret, c)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims("evil", "admin")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	big := token(t, jwt.SigningMethodHS256, authSecret, jwt.MapClaims{"sub": "s", "role": "admin", "pad": strings.Repeat("x", 20<<10)})
	for _, tc := range []struct {
		name, header string
		status       int
		msg          string
	}{
		{"no Authorization header", "", 401, auth.MsgAuthRequired},
		{"empty bearer", "Bearer ", 401, auth.MsgAuthRequired},
		{"garbage bearer", "Bearer ¯\\_(ツ)_/¯", 401, auth.MsgInvalidToken},
		{"three dots", "Bearer ...", 401, auth.MsgInvalidToken},
		{"basic auth", "Basic dXNlcjpwYXNz", 401, auth.MsgInvalidToken},
		{"alg none", "Bearer " + none, 401, auth.MsgInvalidSignature},
		{"HS256 signed with the RS256 public key", "Bearer " + token(t, jwt.SigningMethodHS256, []byte(pubPEM), claims("evil", "admin")), 401, auth.MsgInvalidSignature},
		{"signed by an unknown key", "Bearer " + token(t, jwt.SigningMethodRS256, authOther, claims("evil", "admin")), 401, auth.MsgInvalidSignature},
		{"expired", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }), 401, auth.MsgExpired},
		{"expired beyond the skew", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-2 * time.Minute).Unix() }), 401, auth.MsgExpired},
		{"not yet valid (nbf)", with(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), 401, auth.MsgNotYetValid},
		{"issued in the future", with(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() }), 401, auth.MsgNotYetValid},
		{"wrong issuer", with(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), 401, auth.MsgInvalidIssuer},
		{"no issuer", with(func(c jwt.MapClaims) { delete(c, "iss") }), 401, auth.MsgInvalidIssuer},
		{"wrong audience", with(func(c jwt.MapClaims) { c["aud"] = "someone-else" }), 401, auth.MsgInvalidAudience},
		{"token over 16 KiB", "Bearer " + big, 401, auth.MsgInvalidToken},
		{"read-only role", "Bearer " + hsToken(t, "reader", "read-only"), 403, auth.MsgForbidden},
		{"no role", with(func(c jwt.MapClaims) { delete(c, "role") }), 403, auth.MsgForbidden},
		{"unknown role", with(func(c jwt.MapClaims) { c["role"] = "superuser" }), 403, auth.MsgForbidden},
	} {
		status, body, hdr := doAuth(t, "POST", b.URL+"/api/v1/push", tc.header,
			map[string]any{"items": []item{{"queue": "q", "transactionId": "t", "payload": 1}}})
		requireRefused(t, status, body, hdr, tc.status, tc.msg, tc.name)
	}

	// A 64 KiB Authorization header is over the header limit, which is
	// enforced while the request is read, before any route: 431 with a JSON
	// error (read on a raw connection: the broker answers and closes
	// before the client has sent everything).
	status, body := rawRequest(t, b, "POST /api/v1/push", "Authorization: Bearer "+strings.Repeat("e", 64<<10),
		`{"items":[{"queue":"q","payload":1}]}`)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, status, "%s", body)
	require.Contains(t, string(body), `"error":"Request headers exceed the limit of 32768 bytes"`)

	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.queues`), "a refused push creates no queue")
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.segments`))

	// Inside the 30 s skew, a token that expired 10 s ago is still good;
	// and the same request with a good token writes.
	status, body, _ = doAuth(t, "POST", b.URL+"/api/v1/push", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() }),
		map[string]any{"items": []item{{"queue": "q", "transactionId": "t", "payload": 1}}})
	require.Equal(t, http.StatusCreated, status, "%s", body)
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.segments`))
}

// rawRequest sends "METHOD PATH" with one extra header line and a body on
// a raw connection and reads the answer, even when the broker answers
// before it has read everything.
func rawRequest(t *testing.T, b *testBroker, line, header, body string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	go func() {
		_, _ = fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: x\r\n%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			line, header, len(body), body)
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// routeFixture is a broker with one queue, one message, a consumer cursor,
// a dead letter and a named group, so that every route has something it
// could change.
type routeFixture struct {
	b           *testBroker
	d           *db
	partitionID string
	leaseID     string
	admin       string
}

func newRouteFixture(t *testing.T) *routeFixture {
	t.Helper()
	b := startAuthBroker(t, nil)
	f := &routeFixture{b: b, d: newDB(t, b.Schema), admin: "Bearer " + hsToken(t, "root", "admin")}
	for _, tx := range []string{"t1", "t2", "t3"} {
		status, body, _ := doAuth(t, "POST", b.URL+"/api/v1/push", f.admin,
			map[string]any{"items": []item{{"queue": "q", "transactionId": tx, "payload": tx}}})
		require.Equal(t, http.StatusCreated, status, "%s", body)
	}
	// A dead letter of t1 (group g), then a live lease on t2 (queue mode).
	status, body, _ := doAuth(t, "GET", b.URL+"/api/v1/pop/queue/q?batch=1&consumerGroup=g", f.admin, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var p popResponse
	require.NoError(t, json.Unmarshal(body, &p))
	f.partitionID = p.PartitionID
	status, body, _ = doAuth(t, "POST", b.URL+"/api/v1/ack", f.admin, map[string]any{"transactionId": "t1",
		"partitionId": p.PartitionID, "leaseId": p.LeaseID, "consumerGroup": "g", "status": "dlq", "error": "x"})
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, body, _ = doAuth(t, "GET", b.URL+"/api/v1/pop/queue/q?batch=1", f.admin, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &p))
	f.leaseID = p.LeaseID
	require.Equal(t, int64(1), f.d.int(t, `SELECT count(*) FROM queen.dlq`))
	return f
}

// path fills a route pattern with the fixture's names.
func (f *routeFixture) path(pattern string) string {
	vals := map[string]string{":queue": "q", ":partition": "Default", ":group": "g", ":leaseId": f.leaseID,
		":partitionId": f.partitionID, ":transactionId": "t1"}
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if v, ok := vals[s]; ok {
			segs[i] = url.PathEscape(v)
		}
	}
	return strings.Join(segs, "/")
}

// body is a request body each route would act on if it were allowed.
func (f *routeFixture) body(r wire.Route) any {
	switch {
	case r.Method != http.MethodPost:
		return nil
	case strings.HasSuffix(r.Pattern, "/push"):
		return map[string]any{"items": []item{{"queue": "q", "transactionId": "new", "payload": 1}}}
	case strings.HasSuffix(r.Pattern, "/ack"):
		return map[string]any{"transactionId": "t2", "partitionId": f.partitionID, "leaseId": f.leaseID, "status": "completed"}
	case strings.HasSuffix(r.Pattern, "/ack/batch"):
		return map[string]any{"acknowledgments": []map[string]any{{"transactionId": "t2", "partitionId": f.partitionID,
			"leaseId": f.leaseID, "status": "completed"}}}
	case strings.HasSuffix(r.Pattern, "/transaction"):
		return map[string]any{"operations": []map[string]any{{"type": "push", "items": []item{{"queue": "q2", "payload": 1}}}}}
	case strings.HasSuffix(r.Pattern, "/configure"):
		return map[string]any{"queue": "q", "options": map[string]any{"leaseTime": 999}}
	case strings.HasSuffix(r.Pattern, "/seek"):
		return map[string]any{"toEnd": true}
	case strings.HasSuffix(r.Pattern, "/subscription"):
		return map[string]any{"subscriptionMode": "new"}
	case r.Pattern == "/streams/v1/queries":
		return map[string]any{"name": "s", "source_queue": "q", "config_hash": "h"}
	case r.Pattern == "/streams/v1/cycle", r.Pattern == "/streams/v1/state/get":
		return map[string]any{"query_id": f.partitionID, "partition_id": f.partitionID,
			"push_items": []item{{"queue": "q3", "payload": 1}}}
	case strings.Contains(r.Pattern, "/system/maintenance"):
		return map[string]any{"enabled": false}
	}
	return map[string]any{"seconds": 120}
}

// readOnlyPOST are the POST routes that change nothing.
var readOnlyPOST = map[string]bool{"/api/v1/dedup/lookup": true, "/streams/v1/state/get": true}

// TestAuthEveryRouteChecksItsRole iterates the route table: with no token
// every non-public route answers 401; a token one level too low answers
// 403 on every write and admin route; neither changes anything. An admin
// token reaches every route (so the paths really are the routes').
func TestAuthEveryRouteChecksItsRole(t *testing.T) {
	t.Parallel()
	f := newRouteFixture(t)
	before := f.d.fingerprint(t)
	tokens := map[wire.Role]string{
		wire.RoleReadOnly:  "Bearer " + hsToken(t, "reader", "read-only"),
		wire.RoleReadWrite: "Bearer " + hsToken(t, "writer", "read-write"),
	}
	var writes, admins int
	for _, r := range wire.Routes() {
		what := r.Method + " " + r.Pattern
		u := f.b.URL + f.path(r.Pattern)
		status, body, hdr := doAuth(t, r.Method, u, "", f.body(r))
		if r.Role == wire.RolePublic {
			require.NotEqual(t, http.StatusUnauthorized, status, "%s is public by default: %s", what, body)
			continue
		}
		requireRefused(t, status, body, hdr, 401, auth.MsgAuthRequired, what+" without a token")
		// A write route, judged by its method and not by the table's word:
		// everything but GET, and pop (a GET that leases).
		if (r.Method != http.MethodGet || strings.HasPrefix(r.Pattern, "/api/v1/pop/")) && !readOnlyPOST[r.Pattern] {
			require.Contains(t, []wire.Role{wire.RoleReadWrite, wire.RoleAdmin}, r.Role, "%s writes", what)
			status, body, hdr = doAuth(t, r.Method, u, tokens[wire.RoleReadOnly], f.body(r))
			requireRefused(t, status, body, hdr, 403, auth.MsgForbidden, what+" with a read-only token")
			writes++
		}
		if r.Role == wire.RoleAdmin {
			status, body, hdr = doAuth(t, r.Method, u, tokens[wire.RoleReadWrite], f.body(r))
			requireRefused(t, status, body, hdr, 403, auth.MsgForbidden, what+" with a read-write token")
			admins++
		}
		require.Equal(t, before, f.d.fingerprint(t), "%s: a refused request changed the database", what)
	}
	require.Positive(t, writes)
	require.Positive(t, admins)

	// The same requests with an admin token reach their handlers: none is
	// refused by auth and none is an unknown route (the router's 404 says
	// "Not Found"; a handler's 404 names what it did not find, e.g. once
	// the queue is deleted).
	for _, r := range wire.Routes() {
		status, body, _ := doAuth(t, r.Method, f.b.URL+f.path(r.Pattern), f.admin, f.body(r))
		require.NotContains(t, []int{401, 403, 405}, status, "%s %s with an admin token: %s", r.Method, r.Pattern, body)
		require.NotEqual(t, `{"error":"Not Found"}`, string(body), "%s %s", r.Method, r.Pattern)
	}
	require.NotEqual(t, before, f.d.fingerprint(t), "the admin requests did change things")
}

func TestAuthPublicRoutesAndSkipPaths(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t, nil)
	for _, p := range []string{"/health", "/metrics", "/metrics/prometheus"} {
		status, body, _ := doAuth(t, "GET", b.URL+p, "", nil)
		require.Equal(t, http.StatusOK, status, "%s: %s", p, body)
	}
	// CORS preflight never needs a token.
	status, _, _ := doAuth(t, "OPTIONS", b.URL+"/api/v1/push", "", nil)
	require.Equal(t, http.StatusNoContent, status)

	// JWT_SKIP_PATHS=/health: metrics now need a (read-only) token.
	b = startAuthBroker(t, func(c *auth.Config) { c.SkipPaths = []string{"/health"} })
	status, body, _ := doAuth(t, "GET", b.URL+"/health", "", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	for _, p := range []string{"/metrics", "/metrics/prometheus"} {
		status, body, hdr := doAuth(t, "GET", b.URL+p, "", nil)
		requireRefused(t, status, body, hdr, 401, auth.MsgAuthRequired, p)
		status, body, _ = doAuth(t, "GET", b.URL+p, "Bearer "+hsToken(t, "prom", "read-only"), nil)
		require.Equal(t, http.StatusOK, status, "%s: %s", p, body)
	}
}

// TestAuthClientFlow runs the produce/consume loop as Queen's Go client
// does it (Content-Type and Accept JSON, a bearer token on every call),
// with an RS256 token whose roles come as an array.
func TestAuthClientFlow(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t, nil)
	bearer := "Bearer " + token(t, jwt.SigningMethodRS256, authRSA, claims("orders-svc", "read-only", "read-write"))
	status, body, _ := doAuth(t, "POST", b.URL+"/api/v1/configure", bearer, map[string]any{"queue": "orders", "options": map[string]any{}})
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, body, _ = doAuth(t, "POST", b.URL+"/api/v1/push", bearer,
		map[string]any{"items": []item{{"queue": "orders", "partition": "Default", "transactionId": "o-1", "payload": map[string]any{"n": 1}}}})
	require.Equal(t, http.StatusCreated, status, "%s", body)
	status, body, _ = doAuth(t, "GET", b.URL+"/api/v1/pop/queue/orders?batch=10&wait=false", bearer, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var p popResponse
	require.NoError(t, json.Unmarshal(body, &p))
	require.Len(t, p.Messages, 1)
	require.JSONEq(t, `{"n":1}`, string(p.Messages[0].Data))
	status, body, _ = doAuth(t, "POST", b.URL+"/api/v1/ack", bearer, map[string]any{"transactionId": "o-1",
		"partitionId": p.PartitionID, "leaseId": p.LeaseID, "status": "completed"})
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Contains(t, string(body), `"success":true`)
	status, body, _ = doAuth(t, "GET", b.URL+"/api/v1/pop/queue/orders?batch=10&wait=false", bearer, nil)
	require.Equal(t, http.StatusNoContent, status, "%s", body)
}

// TestAuthJWKSThroughTheBroker: keys from a JWKS endpoint; while it is
// down, tokens under cached keys still work and a token naming a new key
// is refused (nothing written); once it is back, the new key works.
func TestAuthJWKSThroughTheBroker(t *testing.T) {
	t.Parallel()
	keyset := func(keys ...*rsa.PrivateKey) []byte {
		set := jwk.NewSet()
		for i, k := range keys {
			j, err := jwk.Import(&k.PublicKey)
			require.NoError(t, err)
			require.NoError(t, j.Set(jwk.KeyIDKey, fmt.Sprintf("k%d", i+1)))
			require.NoError(t, set.AddKey(j))
		}
		b, err := json.Marshal(set)
		require.NoError(t, err)
		return b
	}
	var (
		up   = make(chan bool, 1)
		keys = make(chan []byte, 1)
	)
	up <- true
	keys <- keyset(authRSA)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		u := <-up
		up <- u
		k := <-keys
		keys <- k
		if !u {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(k)
	}))
	defer srv.Close()
	b := startBroker(t, "", func(c *Config) {
		c.Auth.Enabled = true
		c.Auth.JWKSURL = srv.URL
		c.Auth.JWKSMinRefresh = 0
	})
	d := newDB(t, b.Schema)
	kid := func(key *rsa.PrivateKey, id string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "svc", "role": "read-write"})
		tok.Header["kid"] = id
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return "Bearer " + s
	}
	push := func(bearer, tx string) (int, []byte, http.Header) {
		return doAuth(t, "POST", b.URL+"/api/v1/push", bearer, map[string]any{"items": []item{{"queue": "q", "transactionId": tx, "payload": 1}}})
	}
	status, body, _ := push(kid(authRSA, "k1"), "a")
	require.Equal(t, http.StatusCreated, status, "%s", body)

	<-up
	up <- false
	<-keys
	keys <- keyset(authRSA, authOther)
	status, body, _ = push(kid(authRSA, "k1"), "b")
	require.Equal(t, http.StatusCreated, status, "cached key while the JWKS is down: %s", body)
	status, body, hdr := push(kid(authOther, "k2"), "c")
	requireRefused(t, status, body, hdr, 401, auth.MsgInvalidSignature, "new key while the JWKS is down")
	require.Equal(t, int64(2), d.int(t, `SELECT count(*) FROM queen.segments`))

	<-up
	up <- true
	status, body, _ = push(kid(authOther, "k2"), "c")
	require.Equal(t, http.StatusCreated, status, "new key once the JWKS is back: %s", body)
}

// storedSubs decodes every stored frame of a queue and returns its
// producer subjects by transaction id.
func (d *db) storedSubs(t *testing.T, queue string) map[string]string {
	t.Helper()
	rows, err := d.pool.Query(t.Context(), d.q(`SELECT s.frames, s.frame_count FROM queen.segments s
		JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`), queue)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var seg []byte
		var n int
		require.NoError(t, rows.Scan(&seg, &n))
		frames, err := partition.DecodeSegment(seg, n)
		require.NoError(t, err)
		for _, f := range frames {
			out[f.TransactionID] = f.ProducerSub
		}
	}
	require.NoError(t, rows.Err())
	return out
}

// subsOf reads producerSub from a JSON list of messages (nil for null).
func subsOf(t *testing.T, body []byte, key string) map[string]*string {
	t.Helper()
	var v map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &v), "%s", body)
	var ms []struct {
		TransactionID string  `json:"transactionId"`
		ProducerSub   *string `json:"producerSub"`
	}
	require.NoError(t, json.Unmarshal(v[key], &ms), "%s", body)
	out := map[string]*string{}
	for _, m := range ms {
		out[m.TransactionID] = m.ProducerSub
	}
	return out
}

// TestAuthProducerIdentity: with auth on, push and transaction stamp the
// token's sub on every message (stored in the segment frame), a
// producerSub in the body is ignored, and pop, the DLQ, a replay and the
// message reads return it. With auth off it is null everywhere.
func TestAuthProducerIdentity(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("auth=%v", on), func(t *testing.T) {
			t.Parallel()
			var b *testBroker
			bearer, want := "", (*string)(nil)
			if on {
				b = startAuthBroker(t, nil)
				bearer = "Bearer " + hsToken(t, "billing-svc", "admin")
				s := "billing-svc"
				want = &s
			} else {
				b = startBroker(t, "", nil)
			}
			d := newDB(t, b.Schema)
			call := func(method, path string, body any) []byte {
				t.Helper()
				status, out, _ := doAuth(t, method, b.URL+path, bearer, body)
				require.Less(t, status, 300, "%s %s: %s", method, path, out)
				return out
			}
			call("POST", "/api/v1/push", map[string]any{"items": []item{
				{"queue": "ids", "transactionId": "plain", "payload": 1},
				{"queue": "ids", "transactionId": "forged", "payload": 2, "producerSub": "someone-else"},
			}})
			call("POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
				{"type": "push", "items": []item{{"queue": "ids", "transactionId": "in-txn", "payload": 3, "producerSub": "x"}}}}})

			wantStored := map[string]string{"plain": "", "forged": "", "in-txn": ""}
			if on {
				wantStored = map[string]string{"plain": "billing-svc", "forged": "billing-svc", "in-txn": "billing-svc"}
			}
			require.Equal(t, wantStored, d.storedSubs(t, "ids"), "the segment frames carry the token's sub, never the body's")

			popped := call("GET", "/api/v1/pop/queue/ids?batch=10", nil)
			got := subsOf(t, popped, "messages")
			require.Len(t, got, 3)
			for tx, sub := range got {
				require.Equal(t, want, sub, "pop %s", tx)
			}
			var p popResponse
			require.NoError(t, json.Unmarshal(popped, &p))

			listed := subsOf(t, call("GET", "/api/v1/messages?queue=ids", nil), "messages")
			require.Len(t, listed, 3)
			for tx, sub := range listed {
				require.Equal(t, want, sub, "messages list %s", tx)
			}
			var one struct {
				ProducerSub *string `json:"producerSub"`
			}
			require.NoError(t, json.Unmarshal(call("GET", "/api/v1/messages/"+p.PartitionID+"/forged", nil), &one))
			require.Equal(t, want, one.ProducerSub)

			// Dead-letter "forged", then replay it: the subject follows.
			call("POST", "/api/v1/ack", map[string]any{"transactionId": "forged", "partitionId": p.PartitionID,
				"leaseId": p.LeaseID, "status": "dlq", "error": "bad"})
			dlq := subsOf(t, call("GET", "/api/v1/dlq?queue=ids", nil), "messages")
			require.Len(t, dlq, 1)
			require.Equal(t, want, dlq["forged"])
			var stored *string
			require.NoError(t, d.pool.QueryRow(t.Context(), d.q(`SELECT producer_sub FROM queen.dlq`)).Scan(&stored))
			require.Equal(t, want, stored)

			call("POST", "/api/v1/messages/"+p.PartitionID+"/forged/retry", map[string]any{})
			call("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": []map[string]any{
				{"transactionId": "plain", "partitionId": p.PartitionID, "leaseId": p.LeaseID, "status": "completed"},
				{"transactionId": "in-txn", "partitionId": p.PartitionID, "leaseId": p.LeaseID, "status": "completed"}}})
			again := subsOf(t, call("GET", "/api/v1/pop/queue/ids?batch=10", nil), "messages")
			require.Len(t, again, 1, "the replayed message")
			require.Equal(t, want, again["forged"])
		})
	}
}
