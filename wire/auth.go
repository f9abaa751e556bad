package wire

import (
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/internal/auth"
)

// level is the auth level a route needs. A public route is served without
// a token only while its path is in JWT_SKIP_PATHS (the default list has
// /health, /metrics and /metrics/prometheus); taken out of it, it needs a
// read-only token.
func (r Role) level() auth.Level {
	switch r {
	case RoleReadWrite:
		return auth.ReadWrite
	case RoleAdmin:
		return auth.Admin
	default: // public and read-only routes need a read-only token when not skipped
		return auth.ReadOnly
	}
}

// identityKey is the RequestCtx user-value key of the caller's
// auth.Identity (set only when a token was verified).
type identityKey struct{}

// authorize checks the request against the route's level. On refusal it
// writes the 401/403 answer and returns false: the route's handler never
// runs, so a refused request changes nothing.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, r *Route) bool {
	a := s.cfg.Auth
	if a == nil || !a.Enabled() {
		return true
	}
	id, d := a.Check(ctx, requestPath(ctx), string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)), r.Role.level())
	if d != nil {
		if d.Status == fasthttp.StatusUnauthorized {
			ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="regina"`)
		}
		s.log.Debug().Str("route", r.Label()).Int("status", d.Status).Err(d).Msg("request refused by auth")
		writeError(ctx, d.Status, d.Message)
		return false
	}
	if id.Authenticated {
		ctx.SetUserValue(identityKey{}, id)
	}
	return true
}

// appendSub appends a producerSub value: the JSON string, or null when
// the message was pushed without authentication.
func appendSub(b []byte, sub string) []byte {
	if sub == "" {
		return append(b, "null"...)
	}
	return appendString(b, sub)
}

// producerSub is the subject stamped on the messages a request pushes: the
// verified token's sub, "" when auth is off (or the path is skipped).
func producerSub(ctx *fasthttp.RequestCtx) string {
	if id, ok := ctx.UserValue(identityKey{}).(auth.Identity); ok {
		return id.Subject
	}
	return ""
}
