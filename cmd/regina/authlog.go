package main

import (
	"net"
	"strings"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/internal/auth"
)

// logAuth states at start whether authentication is on, and warns when it
// is off while the broker listens beyond the loopback interface.
func logAuth(log zerolog.Logger, host string, cfg auth.Config, a *auth.Authenticator) {
	if a.Enabled() {
		ev := log.Info().Bool("auth", true).Strs("algorithms", a.Algorithms()).
			Strs("skip_paths", cfg.SkipPaths).Dur("clock_skew", cfg.ClockSkew)
		if cfg.JWKSURL != "" {
			ev = ev.Str("jwks_url", cfg.JWKSURL)
		}
		if cfg.Issuer != "" {
			ev = ev.Str("issuer", cfg.Issuer)
		}
		if cfg.Audience != "" {
			ev = ev.Str("audience", cfg.Audience)
		}
		ev.Msg("auth on: every route outside JWT_SKIP_PATHS needs a bearer token with a role")
		return
	}
	log.Info().Bool("auth", false).Msg("auth off (JWT_ENABLED=false): every route is open")
	if !isLoopback(host) {
		log.Warn().Str("host", host).
			Msg("auth is off and HOST is not a loopback address: anyone who reaches the port can push, pop and delete; set JWT_ENABLED=true or HOST=127.0.0.1")
	}
}

// isLoopback reports whether host (HOST) only accepts local connections.
// "0.0.0.0", "::", an empty host and any name but localhost are not.
func isLoopback(host string) bool {
	h := strings.Trim(host, "[]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
