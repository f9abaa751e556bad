package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"
)

// The error texts of refusals ({"error": text}).
const (
	MsgAuthRequired     = "Authentication required"
	MsgInvalidToken     = "Invalid token"
	MsgInvalidSignature = "Invalid token signature"
	MsgExpired          = "Token has expired"
	MsgNotYetValid      = "Token is not yet valid"
	MsgInvalidIssuer    = "Invalid token issuer"
	MsgInvalidAudience  = "Invalid token audience"
	MsgForbidden        = "Insufficient permissions"
)

// Identity is who made a request. With authentication off, or on a skipped
// path, it is the zero Identity.
type Identity struct {
	// Authenticated is true when a token was verified.
	Authenticated bool
	// Subject is the token's sub claim ("" when it has none): the
	// producerSub stamped on pushed messages.
	Subject string
	// Level is the highest level among the token's roles.
	Level Level
}

// Denial is a refused request: 401 (no or bad token) or 403 (a good token
// whose roles do not reach the route's level), and the text of its
// {"error": ...} body.
type Denial struct {
	Status  int
	Message string
	cause   error
}

// Error returns the message and, when there is one, the underlying reason
// (for logs; the body carries Message only).
func (d *Denial) Error() string {
	if d.cause != nil {
		return d.Message + ": " + d.cause.Error()
	}
	return d.Message
}

// Unwrap returns the underlying reason.
func (d *Denial) Unwrap() error { return d.cause }

// Body returns the JSON body of the refusal: {"error": Message}.
func (d *Denial) Body() []byte {
	b, _ := json.Marshal(map[string]string{"error": d.Message})
	return b
}

func unauthorized(msg string, cause error) *Denial {
	return &Denial{Status: http.StatusUnauthorized, Message: msg, cause: cause}
}

// minSecretBytes is the HS256 secret length below which New warns.
const minSecretBytes = 32

// Authenticator checks requests against a Config. Its zero value is not
// usable; New builds one. It is safe for concurrent use.
type Authenticator struct {
	cfg     Config
	methods []string
	secret  []byte
	static  any    // the JWT_PUBLIC_KEY key, nil when unset
	staticA string // the algorithm static serves
	jwks    *jwks
	parser  *jwt.Parser
	skip    map[string]bool
	prefix  []string
}

// Options are the parts of an Authenticator that are not configuration.
type Options struct {
	// Logger receives warnings (a JWKS that cannot be fetched).
	Logger zerolog.Logger
	// Now replaces the clock used for exp, nbf and iat (tests).
	Now func() time.Time
}

// New validates cfg (see Validate) and returns its Authenticator. With
// cfg.Enabled false it only remembers that auth is off. Zero settings are
// taken as given, not defaulted: use WithDefaults for a Config built in
// code. A JWKS endpoint is fetched at
// once; when that fails New still succeeds (logging a warning) and tokens
// needing its keys are refused until a later fetch works.
func New(cfg Config, opt Options) (*Authenticator, error) {
	a := &Authenticator{cfg: cfg}
	if !cfg.Enabled {
		return a, nil
	}
	key, alg, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	a.static, a.staticA = key, alg
	a.secret = cfg.Secret
	if n := len(cfg.Secret); n > 0 && n < minSecretBytes {
		opt.Logger.Warn().Int("bytes", n).
			Msgf("JWT_SECRET is shorter than %d bytes: HS256 tokens are only as strong as the secret (RFC 7518 section 3.2)", minSecretBytes)
	}
	a.methods = methods(cfg, a.staticA)
	for _, p := range cfg.SkipPaths {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			a.prefix = append(a.prefix, pre)
		} else {
			if a.skip == nil {
				a.skip = map[string]bool{}
			}
			a.skip[p] = true
		}
	}
	popts := []jwt.ParserOption{jwt.WithValidMethods(a.methods), jwt.WithLeeway(cfg.ClockSkew), jwt.WithIssuedAt()}
	if cfg.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		popts = append(popts, jwt.WithAudience(cfg.Audience))
	}
	if opt.Now != nil {
		popts = append(popts, jwt.WithTimeFunc(opt.Now))
	}
	a.parser = jwt.NewParser(popts...)
	if cfg.JWKSURL != "" {
		j, err := newJWKS(cfg, opt.Logger.With().Str("component", "auth").Logger())
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		a.jwks = j
	}
	a.cfg = cfg
	return a, nil
}

// methods lists the algorithms accepted: the one named, or under auto
// those of the keys configured.
func methods(cfg Config, staticAlg string) []string {
	if cfg.Algorithm != Auto {
		return []string{cfg.Algorithm}
	}
	var m []string
	if len(cfg.Secret) > 0 {
		m = append(m, HS256)
	}
	if cfg.JWKSURL != "" {
		return append(m, RS256, EdDSA)
	}
	if staticAlg != "" {
		m = append(m, staticAlg)
	}
	return m
}

// Close stops the JWKS refresher, if any.
func (a *Authenticator) Close() {
	if a.jwks != nil {
		a.jwks.close()
	}
}

// Enabled reports whether tokens are checked.
func (a *Authenticator) Enabled() bool { return a.cfg.Enabled }

// Algorithms lists the token algorithms accepted (nil when off).
func (a *Authenticator) Algorithms() []string { return append([]string(nil), a.methods...) }

// Skipped reports whether path is served without a token (JWT_SKIP_PATHS).
func (a *Authenticator) Skipped(path string) bool {
	if a.skip[path] {
		return true
	}
	for _, p := range a.prefix {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Check decides one request: path is the request path, authorization the
// Authorization header ("" when absent), need the level the route needs.
// With auth off, or on a skipped path, it lets everything through with the
// zero Identity.
func (a *Authenticator) Check(ctx context.Context, path, authorization string, need Level) (Identity, *Denial) {
	if !a.cfg.Enabled || a.Skipped(path) {
		return Identity{}, nil
	}
	id, d := a.Verify(ctx, BearerToken(authorization))
	if d != nil {
		return Identity{}, d
	}
	if id.Level < need || id.Level == None {
		return Identity{}, &Denial{Status: http.StatusForbidden, Message: MsgForbidden,
			cause: fmt.Errorf("route needs %s, token grants %s", need, id.Level)}
	}
	return id, nil
}

// BearerToken extracts the token of an Authorization header: the text
// after a case-insensitive "Bearer " prefix, or, without that prefix, the
// whole header (as upstream does), trimmed of spaces.
func BearerToken(header string) string {
	h := strings.TrimSpace(header)
	if len(h) >= 7 && strings.EqualFold(h[:7], "bearer ") {
		h = strings.TrimSpace(h[7:])
	} else if strings.EqualFold(h, "bearer") {
		h = ""
	}
	return h
}

// claims are the claims Regina reads: the registered ones, and the roles
// in "role" and "roles" (each a string or an array of strings).
type claims struct {
	jwt.RegisteredClaims
	Role  roleList `json:"role"`
	Roles roleList `json:"roles"`
}

type roleList []string

func (r *roleList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*r = roleList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("role/roles: want a string or an array of strings")
	}
	*r = many
	return nil
}

// Verify checks a bearer token (already extracted) and returns the identity
// it carries. An empty token is "Authentication required".
func (a *Authenticator) Verify(ctx context.Context, token string) (Identity, *Denial) {
	if token == "" {
		return Identity{}, unauthorized(MsgAuthRequired, nil)
	}
	if len(token) > MaxTokenBytes {
		return Identity{}, unauthorized(MsgInvalidToken, fmt.Errorf("token of %d bytes, over %d", len(token), MaxTokenBytes))
	}
	var c claims
	_, err := a.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) { return a.key(ctx, t) })
	if err != nil {
		if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
			// Only iss and aud are required, and only when configured.
			if a.cfg.Issuer != "" && c.Issuer == "" {
				return Identity{}, unauthorized(MsgInvalidIssuer, err)
			}
			return Identity{}, unauthorized(MsgInvalidAudience, err)
		}
		return Identity{}, classifyError(err)
	}
	id := Identity{Authenticated: true, Subject: c.Subject}
	for _, r := range append(c.Role, c.Roles...) {
		if l, ok := ParseLevel(r); ok && l > id.Level {
			id.Level = l
		}
	}
	return id, nil
}

// key returns the verification key(s) for a token whose alg the parser
// has already checked against the accepted methods. Each algorithm has its
// own key source, so an HS256 token is never checked against a public key
// (key confusion) and no key serves two algorithms.
func (a *Authenticator) key(ctx context.Context, t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if alg == HS256 {
		if len(a.secret) == 0 {
			return nil, errors.New("HS256 is not configured")
		}
		return a.secret, nil
	}
	kid, _ := t.Header["kid"].(string)
	var keys []any
	if a.jwks != nil {
		ks, err := a.jwks.keys(ctx, alg, kid)
		if err != nil && a.static == nil {
			return nil, err
		}
		keys = ks
	}
	if a.static != nil && a.staticA == alg {
		keys = append(keys, a.static)
	}
	if len(keys) == 0 {
		return nil, errUnknownKey
	}
	set := jwt.VerificationKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, k)
	}
	return set, nil
}

// classifyError maps the parser's errors to the documented texts.
func classifyError(err error) *Denial {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthorized(MsgInvalidToken, err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return unauthorized(MsgInvalidSignature, err)
	case errors.Is(err, jwt.ErrTokenExpired):
		return unauthorized(MsgExpired, err)
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return unauthorized(MsgNotYetValid, err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return unauthorized(MsgInvalidIssuer, err)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return unauthorized(MsgInvalidAudience, err)
	}
	return unauthorized(MsgInvalidToken, err)
}
