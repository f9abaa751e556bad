package auth

import (
	"crypto/rsa"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/stretchr/testify/require"
)

// jwksServer is an in-process JWKS endpoint whose answer the test changes:
// a key set, an HTTP error, garbage, or a stall.
type jwksServer struct {
	*httptest.Server
	hits atomic.Int64

	mu     sync.Mutex
	body   []byte
	status int
	stall  chan struct{} // non-nil: requests wait for it to close
}

func newJWKSServer(t *testing.T, keys ...map[string]any) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.setKeys(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, status, stall := s.body, s.status, s.stall
		s.mu.Unlock()
		if stall != nil {
			select {
			case <-stall:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(t *testing.T, keys ...map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	require.NoError(t, err)
	s.answer(http.StatusOK, b)
}

func (s *jwksServer) answer(status int, body []byte) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

// stallFor makes requests hang until the test ends.
func (s *jwksServer) stallFor(t *testing.T) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.stall = ch
	s.mu.Unlock()
	t.Cleanup(func() { close(ch) }) // runs before s.Close (cleanups are LIFO)
}

// jwkOf is the JWK JSON object of pub with the given extra members.
func jwkOf(t *testing.T, pub any, members map[string]any) map[string]any {
	t.Helper()
	k, err := jwk.Import(pub)
	require.NoError(t, err)
	b, err := json.Marshal(k)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	maps.Copy(m, members)
	return m
}

func jwksAuth(t *testing.T, url string, cfg Config) *Authenticator {
	t.Helper()
	cfg.JWKSURL = url
	if cfg.JWKSTimeout == 0 {
		cfg.JWKSTimeout = 2 * time.Second
	}
	cfg.JWKSRefreshInterval = DefaultJWKSRefreshInterval
	return newAuth(t, cfg)
}

func rsToken(t *testing.T, key *rsa.PrivateKey, kid string) string {
	t.Helper()
	var h map[string]any
	if kid != "" {
		h = map[string]any{"kid": kid}
	}
	return "Bearer " + sign(t, jwt.SigningMethodRS256, key, claimsFor("svc", "admin"), h)
}

func requireAccepted(t *testing.T, a *Authenticator, header string) {
	t.Helper()
	id, d := a.Check(t.Context(), "/api/v1/push", header, Admin)
	require.Nil(t, d, "%v", d)
	require.Equal(t, "svc", id.Subject)
}

func TestJWKSKeysAreCachedAndRefreshedOnAnUnknownKid(t *testing.T) {
	t.Parallel()
	srv := newJWKSServer(t,
		jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1", "alg": "RS256", "use": "sig"}),
		jwkOf(t, testEdPub, map[string]any{"kid": "e1"}))
	a := jwksAuth(t, srv.URL, Config{})
	require.Equal(t, []string{RS256, EdDSA}, a.Algorithms())
	require.EqualValues(t, 1, srv.hits.Load(), "fetched once at start")

	requireAccepted(t, a, rsToken(t, testRSA, "r1"))
	requireAccepted(t, a, rsToken(t, testRSA, ""))
	requireAccepted(t, a, "Bearer "+sign(t, jwt.SigningMethodEdDSA, testEd, claimsFor("svc", "admin"), map[string]any{"kid": "e1"}))
	require.EqualValues(t, 1, srv.hits.Load(), "known keys come from the cache")

	// Key rotation: the IdP starts signing with r2; the first token naming
	// it makes Regina fetch the set again.
	srv.setKeys(t, jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1"}),
		jwkOf(t, &testOther.PublicKey, map[string]any{"kid": "r2"}))
	requireAccepted(t, a, rsToken(t, testOther, "r2"))
	require.EqualValues(t, 2, srv.hits.Load())
	requireAccepted(t, a, rsToken(t, testOther, "r2"))
	requireAccepted(t, a, rsToken(t, testRSA, "r1"))
	require.EqualValues(t, 2, srv.hits.Load())

	// A token under a known kid but signed by another key is refused.
	requireDenied(t, a, rsToken(t, testOther, "r1"), ReadOnly, 401, MsgInvalidSignature)
}

func TestJWKSUnknownKidRefreshesAreRateLimited(t *testing.T) {
	t.Parallel()
	srv := newJWKSServer(t, jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1"}))
	a := jwksAuth(t, srv.URL, Config{JWKSMinRefresh: time.Hour})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			tok := rsToken(t, testOther, "made-up-"+strings.Repeat("x", i))
			_, d := a.Check(t.Context(), "/api/v1/push", tok, ReadOnly)
			if d == nil || d.Status != 401 || d.Message != MsgInvalidSignature {
				t.Errorf("unknown kid: want 401 %q, got %v", MsgInvalidSignature, d)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 2, srv.hits.Load(), "one fetch at start, one forced for all the unknown kids")
	requireAccepted(t, a, rsToken(t, testRSA, "r1"))
}

// TestJWKSOutages: while the endpoint fails, is slow or answers garbage,
// cached keys keep working, a token needing a new key is refused after a
// bounded wait, and the new key is used once the endpoint recovers.
func TestJWKSOutages(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(t *testing.T, s *jwksServer){
		"down (500)": func(_ *testing.T, s *jwksServer) {
			s.answer(http.StatusInternalServerError, []byte(`{"error":"boom"}`))
		},
		"garbage":    func(_ *testing.T, s *jwksServer) { s.answer(http.StatusOK, []byte("<html>not a key set")) },
		"empty":      func(_ *testing.T, s *jwksServer) { s.answer(http.StatusOK, nil) },
		"wrong JSON": func(_ *testing.T, s *jwksServer) { s.answer(http.StatusOK, []byte(`{"keys":"nope"}`)) },
		"over 1 MiB": func(_ *testing.T, s *jwksServer) {
			s.answer(http.StatusOK, []byte(`{"keys":[],"pad":"`+strings.Repeat("x", 2<<20)+`"}`))
		},
		"slow (stalls)":   func(t *testing.T, s *jwksServer) { s.stallFor(t) },
		"not found (404)": func(_ *testing.T, s *jwksServer) { s.answer(http.StatusNotFound, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newJWKSServer(t, jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1"}))
			// One second, not less: on a loaded machine a good fetch can
			// take longer than a few hundred ms, and a start without the
			// keys would fail the first check below.
			a := jwksAuth(t, srv.URL, Config{JWKSTimeout: time.Second})
			requireAccepted(t, a, rsToken(t, testRSA, "r1"))
			fail(t, srv)

			done := make(chan *Denial)
			go func() {
				_, d := a.Check(t.Context(), "/api/v1/push", rsToken(t, testOther, "r2"), ReadOnly)
				done <- d
			}()
			select {
			case d := <-done:
				require.NotNil(t, d)
				require.Equal(t, 401, d.Status)
				require.Equal(t, MsgInvalidSignature, d.Message)
			case <-time.After(30 * time.Second): // liveness guard, not a speed assertion
				t.Fatal("a token with an unknown kid hung on a failing JWKS endpoint")
			}
			requireAccepted(t, a, rsToken(t, testRSA, "r1"))
		})
	}
}

func TestJWKSRecoversAfterAnOutage(t *testing.T) {
	t.Parallel()
	srv := newJWKSServer(t, jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1"}))
	a := jwksAuth(t, srv.URL, Config{})
	srv.answer(http.StatusServiceUnavailable, nil)
	requireDenied(t, a, rsToken(t, testOther, "r2"), ReadOnly, 401, MsgInvalidSignature)
	srv.setKeys(t, jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1"}),
		jwkOf(t, &testOther.PublicKey, map[string]any{"kid": "r2"}))
	requireAccepted(t, a, rsToken(t, testOther, "r2"))
}

func TestJWKSUnreachableAtStart(t *testing.T) {
	t.Parallel()
	srv := newJWKSServer(t)
	srv.answer(http.StatusBadGateway, nil)
	a := jwksAuth(t, srv.URL, Config{JWKSTimeout: time.Second})
	requireDenied(t, a, rsToken(t, testRSA, "r1"), ReadOnly, 401, MsgInvalidSignature)
	srv.setKeys(t, jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r1"}))
	requireAccepted(t, a, rsToken(t, testRSA, "r1"))

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	a = jwksAuth(t, closed.URL, Config{JWKSTimeout: 300 * time.Millisecond})
	requireDenied(t, a, rsToken(t, testRSA, "r1"), ReadOnly, 401, MsgInvalidSignature)
}

// TestJWKSKeysThatDoNotFitAreNotUsed: a symmetric key in the set never
// verifies an HS256 token (JWKS serves RS256/EdDSA only), nor does an
// encryption key, a key bound to another alg, or a key of the other type.
func TestJWKSKeysThatDoNotFitAreNotUsed(t *testing.T) {
	t.Parallel()
	srv := newJWKSServer(t,
		jwkOf(t, secret, map[string]any{"kid": "sym"}),
		jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "enc", "use": "enc"}),
		jwkOf(t, &testRSA.PublicKey, map[string]any{"kid": "r512", "alg": "RS512"}),
		jwkOf(t, testEdPub, map[string]any{"kid": "ed"}))
	a := jwksAuth(t, srv.URL, Config{})
	requireDenied(t, a, "Bearer "+sign(t, jwt.SigningMethodHS256, secret, claimsFor("svc", "admin"), map[string]any{"kid": "sym"}), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, rsToken(t, testRSA, "sym"), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, rsToken(t, testRSA, "enc"), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, rsToken(t, testRSA, "r512"), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, rsToken(t, testRSA, "ed"), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, rsToken(t, testRSA, ""), ReadOnly, 401, MsgInvalidSignature)
}
