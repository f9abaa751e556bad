package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

var (
	testRSA              = mustRSA()
	testOther            = mustRSA()
	testEdPub, testEd, _ = ed25519.GenerateKey(rand.Reader)
)

func mustRSA() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

// now is the fixed clock of these tests.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	maps.Copy(tok.Header, header)
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func claimsFor(sub string, roles ...string) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if len(roles) == 1 {
		c["role"] = roles[0]
	} else if len(roles) > 1 {
		c["roles"] = roles
	}
	return c
}

func newAuth(t *testing.T, cfg Config) *Authenticator {
	t.Helper()
	cfg.Enabled = true
	if cfg.Algorithm == "" {
		cfg.Algorithm = Auto
	}
	a, err := New(cfg, Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

var secret = []byte("0123456789abcdef0123456789abcdef")

func requireDenied(t *testing.T, a *Authenticator, header string, need Level, status int, msg string) {
	t.Helper()
	id, d := a.Check(t.Context(), "/api/v1/push", header, need)
	require.NotNil(t, d, "want %d %q, got identity %+v", status, msg, id)
	require.Equal(t, status, d.Status, d.Error())
	require.Equal(t, msg, d.Message, d.Error())
	require.JSONEq(t, `{"error":"`+msg+`"}`, string(d.Body()))
	require.Equal(t, Identity{}, id)
}

func TestValidTokensAndRoles(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret, PublicKey: pkixPEM(t, &testRSA.PublicKey)})
	for _, tc := range []struct {
		name   string
		claims jwt.MapClaims
		want   Level
	}{
		{"role string", claimsFor("svc-a", "read-write"), ReadWrite},
		{"roles array, highest wins", claimsFor("svc-b", "read-only", "admin"), Admin},
		{"role and roles", jwt.MapClaims{"sub": "c", "role": "read-only", "roles": []string{"read-write"}}, ReadWrite},
		{"unknown roles ignored", claimsFor("d", "superuser", "read-only"), ReadOnly},
		{"no role", jwt.MapClaims{"sub": "e"}, None},
	} {
		tok := sign(t, jwt.SigningMethodHS256, secret, tc.claims, nil)
		id, d := a.Verify(t.Context(), tok)
		require.Nil(t, d, tc.name)
		require.Equal(t, Identity{Authenticated: true, Subject: tc.claims["sub"].(string), Level: tc.want}, id, tc.name)
	}
	id, d := a.Check(t.Context(), "/x", "Bearer "+sign(t, jwt.SigningMethodRS256, testRSA, claimsFor("rs", "admin"), nil), Admin)
	require.Nil(t, d)
	require.Equal(t, "rs", id.Subject)
	a2 := newAuth(t, Config{PublicKey: pkixPEM(t, testEdPub)})
	id, d = a2.Check(t.Context(), "/x", "Bearer "+sign(t, jwt.SigningMethodEdDSA, testEd, claimsFor("ed", "read-only"), nil), ReadOnly)
	require.Nil(t, d)
	require.Equal(t, Identity{Authenticated: true, Subject: "ed", Level: ReadOnly}, id)
}

func TestLevelsPerRoute(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret})
	tokens := map[Level]string{}
	for _, l := range []Level{ReadOnly, ReadWrite, Admin} {
		tokens[l] = "Bearer " + sign(t, jwt.SigningMethodHS256, secret, claimsFor("s", l.String()), nil)
	}
	tokens[None] = "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "s"}, nil)
	for have, h := range tokens {
		for _, need := range []Level{ReadOnly, ReadWrite, Admin} {
			_, d := a.Check(t.Context(), "/api/v1/x", h, need)
			if have >= need {
				require.Nil(t, d, "%s on a %s route", have, need)
			} else {
				requireDenied(t, a, h, need, 403, MsgForbidden)
			}
		}
	}
}

func TestAlgNoneIsRefused(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret, PublicKey: pkixPEM(t, &testRSA.PublicKey)})
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claimsFor("evil", "admin"), nil)
	requireDenied(t, a, "Bearer "+none, ReadOnly, 401, MsgInvalidSignature)
	// Hand-made variants: "None", "NONE", and a none token carrying a signature.
	body := strings.SplitN(none, ".", 3)[1]
	for _, alg := range []string{"None", "NONE", "nOnE"} {
		hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"` + alg + `","typ":"JWT"}`))
		requireDenied(t, a, "Bearer "+hdr+"."+body+".", ReadOnly, 401, MsgInvalidSignature)
		requireDenied(t, a, "Bearer "+hdr+"."+body+".c2ln", ReadOnly, 401, MsgInvalidSignature)
	}
}

// TestKeyConfusion: an HS256 token whose HMAC key is the server's RSA
// public key (the classic algorithm confusion attack) is refused, whether
// HS256 is off (RS256 configured) or on with its own secret (auto).
func TestKeyConfusion(t *testing.T) {
	t.Parallel()
	pubPEM := pkixPEM(t, &testRSA.PublicKey)
	forged := func(key string) string {
		return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(key), claimsFor("evil", "admin"), nil)
	}
	for name, a := range map[string]*Authenticator{
		"RS256":                newAuth(t, Config{Algorithm: RS256, PublicKey: pubPEM}),
		"auto, RSA key only":   newAuth(t, Config{PublicKey: pubPEM}),
		"auto, secret and RSA": newAuth(t, Config{Secret: secret, PublicKey: pubPEM}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireDenied(t, a, forged(pubPEM), ReadOnly, 401, MsgInvalidSignature)
			requireDenied(t, a, forged(strings.TrimSpace(pubPEM)), ReadOnly, 401, MsgInvalidSignature)
		})
	}
	// And the reverse: an EdDSA-configured server refuses RS256 tokens.
	a := newAuth(t, Config{Algorithm: EdDSA, PublicKey: pkixPEM(t, testEdPub)})
	requireDenied(t, a, "Bearer "+sign(t, jwt.SigningMethodRS256, testRSA, claimsFor("x", "admin"), nil), ReadOnly, 401, MsgInvalidSignature)
}

func TestWrongKeyAndTamperedTokens(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret, PublicKey: pkixPEM(t, &testRSA.PublicKey)})
	requireDenied(t, a, "Bearer "+sign(t, jwt.SigningMethodRS256, testOther, claimsFor("x", "admin"), nil), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, "Bearer "+sign(t, jwt.SigningMethodHS256, []byte("another secret of 32 bytes......"), claimsFor("x", "admin"), nil), ReadOnly, 401, MsgInvalidSignature)
	// Change the payload of a good read-only token to admin; keep its signature.
	good := strings.Split(sign(t, jwt.SigningMethodHS256, secret, claimsFor("x", "read-only"), nil), ".")
	evil := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x","role":"admin","exp":` + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + `}`))
	requireDenied(t, a, "Bearer "+good[0]+"."+evil+"."+good[2], ReadOnly, 401, MsgInvalidSignature)
	// HS384/RS512 are not among the accepted algorithms, even with the right key.
	requireDenied(t, a, "Bearer "+sign(t, jwt.SigningMethodHS384, secret, claimsFor("x", "admin"), nil), ReadOnly, 401, MsgInvalidSignature)
	requireDenied(t, a, "Bearer "+sign(t, jwt.SigningMethodRS512, testRSA, claimsFor("x", "admin"), nil), ReadOnly, 401, MsgInvalidSignature)
}

// TestTimeClaimsAtTheSkewEdges uses a fixed clock: exp is honoured up to
// skew after it, nbf and iat from skew before them, never further.
func TestTimeClaimsAtTheSkewEdges(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{30 * time.Second, 0} {
		a := newAuth(t, Config{Secret: secret, ClockSkew: skew})
		tok := func(c jwt.MapClaims) string {
			c["sub"], c["role"] = "s", "admin"
			return "Bearer " + sign(t, jwt.SigningMethodHS256, secret, c, nil)
		}
		at := func(d time.Duration) int64 { return now.Add(d).Unix() }
		s := skew
		ok := func(c jwt.MapClaims) {
			t.Helper()
			_, d := a.Check(t.Context(), "/x", tok(c), ReadOnly)
			require.Nil(t, d, "skew %s claims %v", s, c)
		}
		ok(jwt.MapClaims{"exp": at(-s + time.Second)})
		requireDenied(t, a, tok(jwt.MapClaims{"exp": at(-s)}), ReadOnly, 401, MsgExpired)
		requireDenied(t, a, tok(jwt.MapClaims{"exp": at(-s - time.Hour)}), ReadOnly, 401, MsgExpired)
		ok(jwt.MapClaims{"nbf": at(s)})
		requireDenied(t, a, tok(jwt.MapClaims{"nbf": at(s + time.Second)}), ReadOnly, 401, MsgNotYetValid)
		ok(jwt.MapClaims{"iat": at(s)})
		requireDenied(t, a, tok(jwt.MapClaims{"iat": at(s + time.Second)}), ReadOnly, 401, MsgNotYetValid)
		// A claim of the wrong type is not a time.
		requireDenied(t, a, tok(jwt.MapClaims{"exp": "tomorrow"}), ReadOnly, 401, MsgInvalidToken)
	}
}

func TestIssuerAndAudience(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret, Issuer: "https://idp.example", Audience: "regina"})
	tok := func(c jwt.MapClaims) string {
		c["sub"], c["role"] = "s", "admin"
		return "Bearer " + sign(t, jwt.SigningMethodHS256, secret, c, nil)
	}
	_, d := a.Check(t.Context(), "/x", tok(jwt.MapClaims{"iss": "https://idp.example", "aud": "regina"}), Admin)
	require.Nil(t, d)
	_, d = a.Check(t.Context(), "/x", tok(jwt.MapClaims{"iss": "https://idp.example", "aud": []string{"other", "regina"}}), Admin)
	require.Nil(t, d)
	requireDenied(t, a, tok(jwt.MapClaims{"iss": "https://evil.example", "aud": "regina"}), ReadOnly, 401, MsgInvalidIssuer)
	requireDenied(t, a, tok(jwt.MapClaims{"aud": "regina"}), ReadOnly, 401, MsgInvalidIssuer)
	requireDenied(t, a, tok(jwt.MapClaims{"iss": "https://idp.example", "aud": "someone-else"}), ReadOnly, 401, MsgInvalidAudience)
	requireDenied(t, a, tok(jwt.MapClaims{"iss": "https://idp.example"}), ReadOnly, 401, MsgInvalidAudience)
}

func TestGarbageAndEmptyBearerValues(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret, PublicKey: pkixPEM(t, &testRSA.PublicKey)})
	for _, h := range []string{"", " ", "Bearer", "Bearer ", "bearer    ", "BEARER\t"} {
		requireDenied(t, a, h, ReadOnly, 401, MsgAuthRequired)
	}
	good := sign(t, jwt.SigningMethodHS256, secret, claimsFor("s", "admin"), nil)
	for _, h := range []string{
		"Basic dXNlcjpwYXNz", "Bearer not-a-jwt", "Bearer a.b", "Bearer a.b.c.d", "Bearer ...", "Bearer ..",
		"Bearer \x00\x01\x02", "Bearer eyJ!!!.eyJ!!!.sig", "Bearer " + strings.Repeat("A", 100),
		"Bearer " + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + ".e30x.sig",
		"Bearer " + base64.RawURLEncoding.EncodeToString([]byte(`[]`)) + ".e30.sig",
		"Bearer " + good + "x", "Bearer " + good[:len(good)-5], "Bearer Bearer " + good,
		"Bearer " + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
			base64.RawURLEncoding.EncodeToString([]byte(`{"role":7}`)) + ".sig",
	} {
		id, d := a.Check(t.Context(), "/api/v1/push", h, ReadOnly)
		require.NotNil(t, d, "%q", h)
		require.Equal(t, 401, d.Status, "%q", h)
		require.Contains(t, []string{MsgInvalidToken, MsgInvalidSignature}, d.Message, "%q: %v", h, d)
		require.Equal(t, Identity{}, id)
	}
	// The header forms upstream accepts all carry the same token.
	for _, h := range []string{"Bearer " + good, "bearer " + good, "BEARER  " + good + " ", good} {
		_, d := a.Check(t.Context(), "/x", h, Admin)
		require.Nil(t, d, "%q", h)
	}
}

func TestOversizedTokenIsRefusedUnparsed(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Secret: secret})
	big := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "s", "role": "admin",
		"pad": strings.Repeat("x", 64<<10)}, nil)
	require.Greater(t, len(big), 64<<10)
	requireDenied(t, a, "Bearer "+big, ReadOnly, 401, MsgInvalidToken)
	requireDenied(t, a, "Bearer "+strings.Repeat("e", 64<<10), ReadOnly, 401, MsgInvalidToken)
	// Just under the limit, a valid token is still accepted.
	fits := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "s", "role": "admin",
		"pad": strings.Repeat("x", (MaxTokenBytes*3/4)-200)}, nil)
	require.LessOrEqual(t, len(fits), MaxTokenBytes)
	_, d := a.Check(t.Context(), "/x", "Bearer "+fits, Admin)
	require.Nil(t, d)
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BeArEr   abc  ": "abc", "abc": "abc", " abc ": "abc",
		"Bearer": "", "bearer ": "", "": "", "Bearerabc": "Bearerabc",
	} {
		require.Equal(t, want, BearerToken(in), "%q", in)
	}
}
