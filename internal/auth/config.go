package auth

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Algorithm names accepted in JWT_ALGORITHM (matched case-insensitively).
const (
	HS256 = "HS256"
	RS256 = "RS256"
	EdDSA = "EdDSA"
	// Auto accepts the algorithms of the keys configured: HS256 with
	// JWT_SECRET, RS256 and/or EdDSA with JWT_PUBLIC_KEY (by its type) or
	// JWT_JWKS_URL (both).
	Auto = "auto"
)

// DefaultSkipPaths are the paths served without a token unless
// JWT_SKIP_PATHS says otherwise: upstream's default plus the probes
// Regina adds (/health/live, /ready).
var DefaultSkipPaths = []string{"/health", "/health/live", "/ready", "/metrics", "/metrics/prometheus", "/"}

// Defaults of the settings that have one.
const (
	DefaultClockSkew           = 30 * time.Second
	DefaultJWKSRefreshInterval = time.Hour
	DefaultJWKSTimeout         = 5 * time.Second
	DefaultJWKSMinRefresh      = 10 * time.Second
	// MaxTokenBytes bounds a bearer token; a longer one is refused
	// before it is parsed.
	MaxTokenBytes = 16 << 10
)

// Config is the authentication configuration. FromEnv reads it from the
// upstream environment variables; New validates it.
type Config struct {
	// Enabled switches authentication on (JWT_ENABLED, default false).
	// Off, every route is open and nothing else here is used.
	Enabled bool
	// Algorithm is HS256, RS256, EdDSA or auto (JWT_ALGORITHM, default
	// auto).
	Algorithm string
	// Secret is the HS256 shared secret (JWT_SECRET).
	Secret []byte
	// PublicKey is a PEM public key (PKIX "PUBLIC KEY", PKCS#1 "RSA PUBLIC
	// KEY" or a "CERTIFICATE") for RS256 or EdDSA (JWT_PUBLIC_KEY). A
	// literal "\n" in it is read as a newline, as env files often need.
	PublicKey string
	// JWKSURL is an http(s) JWKS endpoint for RS256/EdDSA keys
	// (JWT_JWKS_URL).
	JWKSURL string
	// Issuer, when set, must equal the token's iss (JWT_ISSUER).
	Issuer string
	// Audience, when set, must be among the token's aud (JWT_AUDIENCE).
	Audience string
	// ClockSkew is the leeway on exp, nbf and iat (JWT_CLOCK_SKEW, in
	// seconds or as a Go duration; default 30 s).
	ClockSkew time.Duration
	// SkipPaths are served without a token (JWT_SKIP_PATHS, comma
	// separated; an entry ending in "*" is a prefix). Default
	// DefaultSkipPaths; set but empty skips nothing.
	SkipPaths []string
	// JWKSRefreshInterval is the longest a cached JWKS is kept before it
	// is fetched again (JWT_JWKS_REFRESH_INTERVAL, Regina's; default 1 h;
	// a shorter Cache-Control max-age from the endpoint wins, down to one
	// minute).
	JWKSRefreshInterval time.Duration
	// JWKSTimeout bounds one JWKS fetch and a request's wait for a fetch
	// (JWT_JWKS_TIMEOUT, Regina's; default 5 s).
	JWKSTimeout time.Duration
	// JWKSMinRefresh is the least time between two fetches forced by
	// tokens naming a key the cache does not hold, so that tokens with
	// made-up key ids cannot hammer the endpoint (default 10 s; not an
	// environment variable).
	JWKSMinRefresh time.Duration
}

// Setting describes one variable FromEnv reads, for the broker's help: its
// name, the kind of value, the default and one line of meaning. Field points
// at the Config field it sets (tests check that every field is described).
type Setting struct {
	Env, Type, Default, Help string
	Field                    func(*Config) any
}

// durationType is the Type of the variables parseSeconds reads.
const durationType = "seconds|duration"

// Settings are the JWT_* variables, in the order the help lists them. Every
// exported Config field but JWKSMinRefresh (not a variable) has one.
var Settings = []Setting{
	{"JWT_ENABLED", "bool", "false", "switch token authentication on (off: every route is open)",
		func(c *Config) any { return &c.Enabled }},
	{"JWT_ALGORITHM", "string", Auto, "HS256, RS256, EdDSA or auto (the algorithms of the keys given)",
		func(c *Config) any { return &c.Algorithm }},
	{"JWT_SECRET", "string", "", "HS256 shared secret",
		func(c *Config) any { return &c.Secret }},
	{"JWT_PUBLIC_KEY", "string", "", `PEM public key for RS256 or EdDSA (a literal "\n" reads as a newline)`,
		func(c *Config) any { return &c.PublicKey }},
	{"JWT_JWKS_URL", "string", "", "http(s) JWKS endpoint holding RS256 or EdDSA keys",
		func(c *Config) any { return &c.JWKSURL }},
	{"JWT_ISSUER", "string", "", "when set, a token's iss must equal it",
		func(c *Config) any { return &c.Issuer }},
	{"JWT_AUDIENCE", "string", "", "when set, it must be among a token's aud",
		func(c *Config) any { return &c.Audience }},
	{"JWT_CLOCK_SKEW", durationType, DefaultClockSkew.String(), "leeway on exp, nbf and iat",
		func(c *Config) any { return &c.ClockSkew }},
	{"JWT_SKIP_PATHS", "list", strings.Join(DefaultSkipPaths, ","),
		"comma-separated paths served without a token (a trailing * is a prefix; set but empty: none)",
		func(c *Config) any { return &c.SkipPaths }},
	{"JWT_JWKS_REFRESH_INTERVAL", durationType, "1h", "longest a fetched JWKS is kept (a shorter max-age wins, down to 1m)",
		func(c *Config) any { return &c.JWKSRefreshInterval }},
	{"JWT_JWKS_TIMEOUT", durationType, DefaultJWKSTimeout.String(), "bound on one JWKS fetch and on a request's wait for it",
		func(c *Config) any { return &c.JWKSTimeout }},
}

// FromEnv reads the configuration from the JWT_* environment variables
// through lookup (os.LookupEnv). Every malformed value is reported, each
// with its variable's name. Values that parse are checked against each
// other by New.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := Config{
		Algorithm:           Auto,
		ClockSkew:           DefaultClockSkew,
		SkipPaths:           append([]string(nil), DefaultSkipPaths...),
		JWKSRefreshInterval: DefaultJWKSRefreshInterval,
		JWKSTimeout:         DefaultJWKSTimeout,
		JWKSMinRefresh:      DefaultJWKSMinRefresh,
	}
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		return strings.TrimSpace(v), ok
	}
	var errs []error
	if v, ok := get("JWT_ENABLED"); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("JWT_ENABLED=%q: want true or false", v))
		}
		c.Enabled = b
	}
	if v, ok := get("JWT_ALGORITHM"); ok && v != "" {
		alg, err := parseAlgorithm(v)
		if err != nil {
			errs = append(errs, err)
		}
		c.Algorithm = alg
	}
	if v, ok := lookup("JWT_SECRET"); ok {
		c.Secret = []byte(v)
	}
	if v, ok := get("JWT_PUBLIC_KEY"); ok {
		c.PublicKey = v
	}
	if v, ok := get("JWT_JWKS_URL"); ok {
		c.JWKSURL = v
	}
	if v, ok := get("JWT_ISSUER"); ok {
		c.Issuer = v
	}
	if v, ok := get("JWT_AUDIENCE"); ok {
		c.Audience = v
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{
		{"JWT_CLOCK_SKEW", &c.ClockSkew},
		{"JWT_JWKS_REFRESH_INTERVAL", &c.JWKSRefreshInterval},
		{"JWT_JWKS_TIMEOUT", &c.JWKSTimeout},
	} {
		if v, ok := get(d.name); ok && v != "" {
			dur, err := parseSeconds(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", d.name, v, err))
				continue
			}
			*d.dst = dur
		}
	}
	if v, ok := get("JWT_SKIP_PATHS"); ok {
		c.SkipPaths = nil
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.SkipPaths = append(c.SkipPaths, p)
			}
		}
	}
	return c, errors.Join(errs...)
}

func parseAlgorithm(v string) (string, error) {
	for _, a := range []string{HS256, RS256, EdDSA, Auto} {
		if strings.EqualFold(v, a) {
			return a, nil
		}
	}
	return "", fmt.Errorf("JWT_ALGORITHM=%q is not supported: use HS256, RS256, EdDSA or auto", v)
}

// parseSeconds reads whole seconds ("30") or a Go duration ("30s", "1m").
func parseSeconds(v string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > int64(365*24*time.Hour/time.Second) {
			return 0, errors.New("too large")
		}
		d = time.Duration(n) * time.Second
	} else {
		d, err = time.ParseDuration(v)
		if err != nil {
			return 0, errors.New("want seconds (30) or a duration (30s)")
		}
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// check validates the parts of an enabled configuration that do not need
// key material, and returns the settings' errors together.
func (c Config) check() error {
	var errs []error
	switch c.Algorithm {
	case HS256, RS256, EdDSA, Auto:
	default:
		errs = append(errs, fmt.Errorf("JWT_ALGORITHM=%q is not supported: use HS256, RS256, EdDSA or auto", c.Algorithm))
	}
	hasSecret, hasPEM, hasJWKS := len(c.Secret) > 0, c.PublicKey != "", c.JWKSURL != ""
	switch c.Algorithm {
	case HS256:
		if !hasSecret {
			errs = append(errs, errors.New("JWT_ALGORITHM=HS256 needs JWT_SECRET"))
		}
		if hasPEM || hasJWKS {
			errs = append(errs, errors.New("JWT_ALGORITHM=HS256 never uses JWT_PUBLIC_KEY or JWT_JWKS_URL: unset them, or set JWT_ALGORITHM=auto"))
		}
	case RS256, EdDSA:
		if !hasPEM && !hasJWKS {
			errs = append(errs, fmt.Errorf("JWT_ALGORITHM=%s needs JWT_PUBLIC_KEY or JWT_JWKS_URL", c.Algorithm))
		}
		if hasSecret {
			errs = append(errs, fmt.Errorf("JWT_ALGORITHM=%s never uses JWT_SECRET: unset it, or set JWT_ALGORITHM=auto", c.Algorithm))
		}
	case Auto:
		if !hasSecret && !hasPEM && !hasJWKS {
			errs = append(errs, errors.New("JWT_ENABLED=true needs a key: JWT_SECRET (HS256), JWT_PUBLIC_KEY or JWT_JWKS_URL (RS256, EdDSA)"))
		}
	}
	if hasJWKS {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("JWT_JWKS_URL=%q: want an http(s) URL", c.JWKSURL))
		}
		if c.JWKSTimeout <= 0 {
			errs = append(errs, errors.New("JWT_JWKS_TIMEOUT must be positive"))
		}
		if c.JWKSRefreshInterval <= 0 {
			errs = append(errs, errors.New("JWT_JWKS_REFRESH_INTERVAL must be positive"))
		}
	}
	for _, p := range c.SkipPaths {
		if !strings.HasPrefix(p, "/") {
			errs = append(errs, fmt.Errorf("JWT_SKIP_PATHS entry %q: a path starts with /", p))
		}
	}
	if c.ClockSkew < 0 {
		errs = append(errs, errors.New("JWT_CLOCK_SKEW must not be negative"))
	}
	return errors.Join(errs...)
}

// WithDefaults fills every zero setting with its default (for a Config
// built in code; FromEnv's result is complete). A zero ClockSkew becomes
// the default too.
func (c Config) WithDefaults() Config {
	if c.Algorithm == "" {
		c.Algorithm = Auto
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = DefaultClockSkew
	}
	if c.SkipPaths == nil {
		c.SkipPaths = append([]string(nil), DefaultSkipPaths...)
	}
	if c.JWKSRefreshInterval == 0 {
		c.JWKSRefreshInterval = DefaultJWKSRefreshInterval
	}
	if c.JWKSTimeout == 0 {
		c.JWKSTimeout = DefaultJWKSTimeout
	}
	if c.JWKSMinRefresh == 0 {
		c.JWKSMinRefresh = DefaultJWKSMinRefresh
	}
	return c
}

// Validate reports every setting of an enabled configuration that cannot
// be honoured, each naming its variable (nil when auth is off). New runs
// it too.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	_, _, err := c.validate()
	return err
}

// validate checks the settings and parses JWT_PUBLIC_KEY, returning the key
// and the algorithm it serves (nil, "" when unset).
func (c Config) validate() (any, string, error) {
	if err := c.check(); err != nil {
		return nil, "", err
	}
	if c.PublicKey == "" {
		return nil, "", nil
	}
	key, alg, err := parsePublicKey(c.PublicKey)
	if err != nil {
		return nil, "", err
	}
	if c.Algorithm != Auto && c.Algorithm != alg {
		return nil, "", fmt.Errorf("JWT_ALGORITHM=%s but JWT_PUBLIC_KEY is a key for %s", c.Algorithm, alg)
	}
	return key, alg, nil
}
