// Package auth owns Regina's optional JWT authentication: the JWT_*
// configuration (parsed from the same environment variables as upstream
// Queen and validated at start), bearer token verification (HS256 with a
// shared secret, RS256 and EdDSA with a PEM public key or a JWKS endpoint
// whose keys are cached and refreshed when a token names an unknown key),
// the role levels (read-only < read-write < admin) and the refusals with
// their documented status and {"error": ...} text.
//
// It knows nothing of HTTP servers, routes or storage: the caller (wire)
// hands it the request path, the Authorization header and the level the
// route needs, and gets back the caller's identity or a Denial to send.
// Token parsing and signature checks are github.com/golang-jwt/jwt/v5's;
// JWKS fetching and caching are github.com/lestrrat-go/jwx/v3's jwk.Cache.
package auth
