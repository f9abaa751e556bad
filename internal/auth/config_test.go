package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func pemOf(t *testing.T, typ string, der []byte) string {
	t.Helper()
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func pkixPEM(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	return pemOf(t, "PUBLIC KEY", der)
}

func TestFromEnvDefaults(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(envOf(nil))
	require.NoError(t, err)
	require.False(t, c.Enabled)
	require.Equal(t, Auto, c.Algorithm)
	require.Equal(t, 30*time.Second, c.ClockSkew)
	require.Equal(t, DefaultSkipPaths, c.SkipPaths)
	a, err := New(c, Options{})
	require.NoError(t, err)
	require.False(t, a.Enabled())
	id, d := a.Check(t.Context(), "/api/v1/push", "", Admin)
	require.Nil(t, d, "auth off: every route is open")
	require.Equal(t, Identity{}, id)
}

func TestFromEnvReadsEveryVariable(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(envOf(map[string]string{
		"JWT_ENABLED": "true", "JWT_ALGORITHM": "hs256", "JWT_SECRET": "s3cret",
		"JWT_ISSUER": "https://issuer", "JWT_AUDIENCE": "regina", "JWT_CLOCK_SKEW": "5",
		"JWT_SKIP_PATHS": " /health , /public/* ,", "JWT_JWKS_TIMEOUT": "250ms",
		"JWT_JWKS_REFRESH_INTERVAL": "600",
	}))
	require.NoError(t, err)
	require.Equal(t, Config{Enabled: true, Algorithm: HS256, Secret: []byte("s3cret"), Issuer: "https://issuer",
		Audience: "regina", ClockSkew: 5 * time.Second, SkipPaths: []string{"/health", "/public/*"},
		JWKSTimeout: 250 * time.Millisecond, JWKSRefreshInterval: 10 * time.Minute,
		JWKSMinRefresh: DefaultJWKSMinRefresh}, c)

	c, err = FromEnv(envOf(map[string]string{"JWT_SKIP_PATHS": ""}))
	require.NoError(t, err)
	require.Empty(t, c.SkipPaths, "set but empty: nothing is skipped")
}

func TestFromEnvRejectsMalformedValues(t *testing.T) {
	t.Parallel()
	for name, val := range map[string]string{
		"JWT_ENABLED":               "yes please",
		"JWT_ALGORITHM":             "none",
		"JWT_CLOCK_SKEW":            "-5",
		"JWT_JWKS_TIMEOUT":          "soon",
		"JWT_JWKS_REFRESH_INTERVAL": "99999999999999",
	} {
		_, err := FromEnv(envOf(map[string]string{name: val}))
		require.ErrorContains(t, err, name, "%s=%q", name, val)
	}
	_, err := FromEnv(envOf(map[string]string{"JWT_ALGORITHM": "ES256"}))
	require.ErrorContains(t, err, "use HS256, RS256, EdDSA or auto")
}

func TestNewRejectsSettingsItCannotHonour(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	privDER, err := x509.MarshalPKCS8PrivateKey(edPriv)
	require.NoError(t, err)
	rsaPEM := pkixPEM(t, &rsaKey.PublicKey)

	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no key", Config{Algorithm: Auto}, "needs a key"},
		{"HS256 without secret", Config{Algorithm: HS256}, "JWT_ALGORITHM=HS256 needs JWT_SECRET"},
		{"HS256 with a public key", Config{Algorithm: HS256, Secret: []byte("x"), PublicKey: rsaPEM}, "never uses JWT_PUBLIC_KEY"},
		{"RS256 with a secret", Config{Algorithm: RS256, Secret: []byte("x"), PublicKey: rsaPEM}, "never uses JWT_SECRET"},
		{"RS256 without key", Config{Algorithm: RS256}, "needs JWT_PUBLIC_KEY or JWT_JWKS_URL"},
		{"RS256 with an Ed25519 key", Config{Algorithm: RS256, PublicKey: pkixPEM(t, edPub)}, "is a key for EdDSA"},
		{"EdDSA with an RSA key", Config{Algorithm: EdDSA, PublicKey: rsaPEM}, "is a key for RS256"},
		{"a private key", Config{Algorithm: Auto, PublicKey: pemOf(t, "PRIVATE KEY", privDER)}, "give the public key only"},
		{"not PEM", Config{Algorithm: Auto, PublicKey: "ssh-rsa AAAA"}, "JWT_PUBLIC_KEY is not PEM"},
		{"corrupt PEM", Config{Algorithm: Auto, PublicKey: pemOf(t, "PUBLIC KEY", []byte("junk"))}, "JWT_PUBLIC_KEY:"},
		{"small RSA key", Config{Algorithm: RS256, PublicKey: pkixPEM(t, &small.PublicKey)}, "1024 bits"},
		{"JWKS URL not http", Config{Algorithm: RS256, JWKSURL: "file:///etc/keys"}, "JWT_JWKS_URL"},
		{"skip path without slash", Config{Algorithm: HS256, Secret: []byte("x"), SkipPaths: []string{"health"}}, "JWT_SKIP_PATHS"},
		{"unknown algorithm", Config{Algorithm: "ES256", Secret: []byte("x")}, "not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Enabled = true
			_, err := New(tc.cfg, Options{})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPublicKeyForms(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		pem string
		alg string
	}{
		"PKIX RSA":                     {pkixPEM(t, &rsaKey.PublicKey), RS256},
		"PKCS1 RSA":                    {pemOf(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)), RS256},
		"Ed25519":                      {pkixPEM(t, edPub), EdDSA},
		"escaped newlines (env files)": {strings.ReplaceAll(pkixPEM(t, edPub), "\n", `\n`), EdDSA},
	} {
		a, err := New(Config{Enabled: true, Algorithm: Auto, PublicKey: tc.pem}, Options{})
		require.NoError(t, err, name)
		require.Equal(t, []string{tc.alg}, a.Algorithms(), name)
	}
}

func TestAutoAcceptsTheAlgorithmsOfTheKeysGiven(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	a, err := New(Config{Enabled: true, Algorithm: Auto, Secret: []byte("s"), PublicKey: pkixPEM(t, &rsaKey.PublicKey)}, Options{})
	require.NoError(t, err)
	require.Equal(t, []string{HS256, RS256}, a.Algorithms())
	a, err = New(Config{Enabled: true, Algorithm: HS256, Secret: []byte("s")}, Options{})
	require.NoError(t, err)
	require.Equal(t, []string{HS256}, a.Algorithms())
}

func TestSkipPaths(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Enabled: true, Algorithm: HS256, Secret: []byte("s"), SkipPaths: DefaultSkipPaths}, Options{})
	require.NoError(t, err)
	for _, p := range []string{"/health", "/metrics", "/metrics/prometheus", "/"} {
		require.True(t, a.Skipped(p), p)
		_, d := a.Check(t.Context(), p, "", Admin)
		require.Nil(t, d, p)
	}
	for _, p := range []string{"/api/v1/push", "/healthz", "/metrics/other", ""} {
		require.False(t, a.Skipped(p), p)
	}
	a, err = New(Config{Enabled: true, Algorithm: HS256, Secret: []byte("s"), SkipPaths: []string{"/open/*"}}, Options{})
	require.NoError(t, err)
	require.True(t, a.Skipped("/open/x/y"))
	require.False(t, a.Skipped("/health"), "JWT_SKIP_PATHS replaces the default list")
	_, d := a.Check(t.Context(), "/health", "", ReadOnly)
	require.NotNil(t, d)
	require.Equal(t, 401, d.Status)
}

func TestLevels(t *testing.T) {
	t.Parallel()
	require.True(t, None < ReadOnly && ReadOnly < ReadWrite && ReadWrite < Admin)
	for _, l := range []Level{ReadOnly, ReadWrite, Admin} {
		got, ok := ParseLevel(l.String())
		require.True(t, ok)
		require.Equal(t, l, got)
	}
	_, ok := ParseLevel("Admin")
	require.False(t, ok, "role names are exact")
}

func TestWithDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	fromEnv, err := FromEnv(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, fromEnv, Config{}.WithDefaults(), "a Config built in code gets FromEnv's defaults")
	require.NoError(t, Config{Algorithm: "junk"}.Validate(), "auth off: nothing to honour")
	require.ErrorContains(t, Config{Enabled: true, Algorithm: Auto}.WithDefaults().Validate(), "needs a key")
	require.ErrorContains(t, Config{Enabled: true, Algorithm: RS256, JWKSURL: "https://idp/jwks"}.Validate(),
		"JWT_JWKS_TIMEOUT must be positive", "zero is taken as given, never defaulted silently")
	require.NoError(t, Config{Enabled: true, Secret: []byte("s")}.WithDefaults().Validate())
}

// TestSettingsDescribeFromEnv keeps the help's list of JWT_* variables true:
// it names exactly the variables FromEnv reads, every Config field (but
// JWKSMinRefresh, not a variable) has its entry, and each default shown is
// the one FromEnv applies.
func TestSettingsDescribeFromEnv(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	_, err := FromEnv(func(k string) (string, bool) { read[k] = true; return "", false })
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, s := range Settings {
		listed[s.Env] = true
	}
	require.Equal(t, read, listed, "Settings must list exactly the variables FromEnv reads")

	var c Config
	described := map[any]bool{}
	for _, s := range Settings {
		described[s.Field(&c)] = true
	}
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Name == "JWKSMinRefresh" {
			continue
		}
		require.True(t, described[v.Field(i).Addr().Interface()], "Config.%s has no entry in Settings", f.Name)
	}

	defaults, err := FromEnv(envOf(nil))
	require.NoError(t, err)
	for _, s := range Settings {
		if s.Default == "" {
			continue
		}
		got, err := FromEnv(envOf(map[string]string{s.Env: s.Default}))
		require.NoError(t, err, s.Env)
		require.Equal(t, defaults, got, "%s=%s is not the default", s.Env, s.Default)
	}
}
