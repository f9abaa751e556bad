package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/rs/zerolog"
)

// maxJWKSBytes bounds a JWKS response body.
const maxJWKSBytes = 1 << 20

// errUnknownKey is a token naming a key the JWKS does not hold, even after
// a refresh (or while the endpoint cannot be reached).
var errUnknownKey = errors.New("no key in the JWKS matches the token")

// jwks holds the keys of a JWKS endpoint. jwk.Cache fetches them in the
// background (on Cache-Control max-age, clamped to [1 min, refresh
// interval]; after a failed fetch it tries again a minute later) and keeps
// the last good set when a fetch fails or returns garbage. A token naming a
// key id not in the set forces one refresh, shared by the requests that
// want it and spaced by minRefresh, and each request waits for it at most
// timeout.
type jwks struct {
	url        string
	cache      *jwk.Cache
	res        *httprc.ResourceBase[jwk.Set]
	timeout    time.Duration
	minRefresh time.Duration
	log        zerolog.Logger
	cancel     context.CancelFunc

	mu       sync.Mutex
	inflight chan struct{} // closed when the running forced refresh ends
	last     time.Time     // start of the last forced refresh
	closed   bool          // no forced refresh starts after close
}

func newJWKS(cfg Config, log zerolog.Logger) (*jwks, error) {
	ctx, cancel := context.WithCancel(context.Background())
	client := httprc.NewClient(httprc.WithErrorSink(errorSink{log}))
	cache, err := jwk.NewCache(ctx, client)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("jwks cache: %w", err)
	}
	minInterval := min(time.Minute, cfg.JWKSRefreshInterval)
	err = cache.Register(ctx, cfg.JWKSURL,
		jwk.WithWaitReady(false),
		jwk.WithHTTPClient(&http.Client{Timeout: cfg.JWKSTimeout}),
		jwk.WithMaxFetchBodySize(maxJWKSBytes),
		jwk.WithMinInterval(minInterval),
		jwk.WithMaxInterval(cfg.JWKSRefreshInterval),
	)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("jwks register %s: %w", cfg.JWKSURL, err)
	}
	res, err := cache.LookupResource(ctx, cfg.JWKSURL)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("jwks %s: %w", cfg.JWKSURL, err)
	}
	j := &jwks{url: cfg.JWKSURL, cache: cache, res: res, timeout: cfg.JWKSTimeout,
		minRefresh: cfg.JWKSMinRefresh, log: log, cancel: cancel}
	wait, stop := context.WithTimeout(ctx, cfg.JWKSTimeout)
	defer stop()
	if err := res.Ready(wait); err != nil {
		log.Warn().Str("url", cfg.JWKSURL).Err(err).
			Msg("JWKS not loaded yet: tokens signed with its keys are refused until it is; retrying in the background")
	}
	return j, nil
}

type errorSink struct{ log zerolog.Logger }

// Put logs a failed background fetch (at most one a minute: the cache's
// retry interval).
func (s errorSink) Put(_ context.Context, err error) {
	s.log.Warn().Err(err).Msg("JWKS fetch failed; the keys already cached stay in use")
}

// keys returns the candidate verification keys for a token's alg and kid.
// An unknown kid forces a refresh (see jwks); with no kid, every key of
// the set that fits alg is a candidate.
func (j *jwks) keys(ctx context.Context, alg, kid string) ([]any, error) {
	if ks := j.match(alg, kid); len(ks) > 0 {
		return ks, nil
	}
	j.refresh(ctx)
	if ks := j.match(alg, kid); len(ks) > 0 {
		return ks, nil
	}
	return nil, errUnknownKey
}

// match reads the cached set (never blocking on the cache's goroutines).
func (j *jwks) match(alg, kid string) []any {
	set := j.res.Resource()
	if set == nil {
		return nil
	}
	var out []any
	for i := range set.Len() {
		k, _ := set.Key(i)
		if id, _ := k.KeyID(); kid != "" && id != kid {
			continue
		}
		if use, ok := k.KeyUsage(); ok && use != "sig" {
			continue
		}
		if a, ok := k.Algorithm(); ok && a.String() != alg {
			continue
		}
		var raw any
		if err := jwk.Export(k, &raw); err != nil {
			continue
		}
		key, kalg, err := classify(raw)
		if err != nil || kalg != alg {
			continue
		}
		out = append(out, key)
	}
	return out
}

// refresh forces a fetch unless one ran less than minRefresh ago, joins a
// fetch already running, and waits for it at most timeout (or ctx).
func (j *jwks) refresh(ctx context.Context) {
	j.mu.Lock()
	done := j.inflight
	if done == nil {
		if j.closed || time.Since(j.last) < j.minRefresh {
			j.mu.Unlock()
			return
		}
		j.last = time.Now()
		done = make(chan struct{})
		j.inflight = done
		go j.fetch(done)
	}
	j.mu.Unlock()
	t := time.NewTimer(j.timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (j *jwks) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	if _, err := j.cache.Refresh(ctx, j.url); err != nil {
		j.log.Warn().Str("url", j.url).Err(err).Msg("JWKS refresh for an unknown key id failed; the keys already cached stay in use")
	}
	j.mu.Lock()
	j.inflight = nil
	j.mu.Unlock()
	close(done)
}

// close waits for a forced refresh still running (bounded by timeout) and
// stops the cache's goroutines.
func (j *jwks) close() {
	j.mu.Lock()
	done := j.inflight
	j.closed = true
	j.mu.Unlock()
	if done != nil {
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = j.cache.Shutdown(ctx)
	j.cancel()
}
