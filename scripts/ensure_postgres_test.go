package scripts

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runEnsure runs a copy of ensure-postgres.sh placed in a fresh directory (so
// a throwaway cluster, if it were wrongly started, would appear under that
// directory's .data and not in the repository) with exactly the given
// DATABASE_URL / PG_* settings. It returns stdout, stderr, the exit code and
// the directory.
func runEnsure(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int, repo string) {
	t.Helper()
	src, err := os.ReadFile("ensure-postgres.sh")
	require.NoError(t, err)
	repo = t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "scripts"), 0o755))
	script := filepath.Join(repo, "scripts", "ensure-postgres.sh")
	require.NoError(t, os.WriteFile(script, src, 0o755))
	t.Cleanup(func() {
		// Had the script wrongly started a throwaway cluster for this
		// directory, stop and remove it (as root it lives under /var/tmp).
		_ = exec.Command("bash", script, "--stop").Run()
		sum := sha1.Sum([]byte(repo))
		_ = os.RemoveAll("/var/tmp/regina-pg-" + hex.EncodeToString(sum[:])[:12])
	})

	cmd := exec.Command("bash", append([]string{script}, args...)...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "PG") {
			continue // only what the case sets
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "PG_CONNECT_TIMEOUT=3")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code = 0
	ee := &exec.ExitError{}
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code, repo
}

// deadPort returns a loopback port nothing listens on.
func deadPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return strconv.Itoa(port)
}

func requirePsql(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("psql"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql"); len(m) == 0 {
			t.Skip("psql is not installed")
		}
	}
}

// A server the user named that does not answer, or refuses us, is an error
// with a clear message and a non-zero exit: never a throwaway cluster that
// would take a producer's messages where nobody reads them.
func TestEnsurePostgresNeverReplacesANamedServer(t *testing.T) {
	t.Parallel()
	requirePsql(t)
	port := deadPort(t)
	cases := []struct {
		name, named string
		env         map[string]string
		reason      string
	}{
		{"DATABASE_URL does not answer", "DATABASE_URL",
			map[string]string{"DATABASE_URL": "postgres://app:s3cret@127.0.0.1:" + port + "/orders?sslmode=disable"}, "does not answer"},
		{"key=value DATABASE_URL does not answer", "DATABASE_URL",
			map[string]string{"DATABASE_URL": "host=127.0.0.1 port=" + port + " dbname=orders password=s3cret"}, "does not answer"},
		{"PG_PORT does not answer", "PG_PORT", map[string]string{"PG_PORT": port}, "does not answer"},
		{"PG_HOST and PG_PORT do not answer", "PG_HOST, PG_PORT", map[string]string{"PG_HOST": "127.0.0.1", "PG_PORT": port}, "does not answer"},
		{"PG_USER is refused", "PG_USER", map[string]string{"PG_USER": "no_such_role_regina"}, "refuses the connection"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.reason == "refuses the connection" && !serverAnswers("127.0.0.1:5432") {
				t.Skip("no PostgreSQL on 127.0.0.1:5432 to refuse us")
			}
			stdout, stderr, code, repo := runEnsure(t, c.env)
			require.NotZero(t, code, "stderr:\n%s", stderr)
			require.Empty(t, stdout, "no URL may be printed")
			require.Contains(t, stderr, c.named+" names the server")
			require.Contains(t, stderr, c.reason)
			require.Contains(t, stderr, "Not falling back to a throwaway local cluster")
			require.NotContains(t, stderr, "s3cret", "the password is not echoed")
			require.NotContains(t, stderr, "THROWAWAY")
			_, err := os.Stat(filepath.Join(repo, ".data", "pg"))
			require.True(t, os.IsNotExist(err), "a throwaway cluster was set up in %s/.data/pg", repo)
		})
	}
}

// A named server that answers is used as is: exactly one line on stdout, the
// URL for the requested database.
func TestEnsurePostgresUsesANamedServerThatAnswers(t *testing.T) {
	t.Parallel()
	requirePsql(t)
	if !serverAnswers("127.0.0.1:5432") {
		t.Skip("no PostgreSQL on 127.0.0.1:5432")
	}
	stdout, stderr, code, _ := runEnsure(t, map[string]string{"PG_HOST": "127.0.0.1", "PG_PORT": "5432", "PG_USER": "postgres"})
	if code != 0 && strings.Contains(stderr, "refuses") {
		t.Skipf("the server on 127.0.0.1:5432 refuses user postgres: %s", stderr)
	}
	require.Zero(t, code, "stderr:\n%s", stderr)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable\n", stdout)
	require.NotContains(t, stderr, "THROWAWAY")
}

func serverAnswers(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// --drop (make clean-db) drops the databases it is given that exist on the
// configured server, says which it did not find, and leaves every other
// database alone; a named server that cannot be reached is an error.
func TestEnsurePostgresDropRemovesOnlyTheNamedDatabases(t *testing.T) {
	t.Parallel()
	requirePsql(t)
	if !serverAnswers("127.0.0.1:5432") {
		t.Skip("no PostgreSQL on 127.0.0.1:5432")
	}
	server := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	prefix := "regina_droptest_" + strconv.Itoa(os.Getpid()) + "_"
	a, keep, missing := prefix+"a", prefix+"keep", prefix+"missing"
	for _, db := range []string{a, keep} {
		psql(t, server, "CREATE DATABASE "+db)
		t.Cleanup(func() { psql(t, server, "DROP DATABASE IF EXISTS "+db) })
	}

	_, stderr, code, repo := runEnsure(t, map[string]string{"DATABASE_URL": server}, "--drop", a, missing)
	require.Zero(t, code, "stderr:\n%s", stderr)
	require.Contains(t, stderr, `dropped database "`+a+`" on 127.0.0.1:5432`)
	require.Contains(t, stderr, `no database "`+missing+`"`)
	left := psql(t, server, "SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database WHERE datname LIKE '"+prefix+"%'")
	require.Equal(t, keep, left, "only the named databases are dropped")
	_, err := os.Stat(filepath.Join(repo, ".data"))
	require.True(t, os.IsNotExist(err), "--drop made %s/.data", repo)

	_, stderr, code, _ = runEnsure(t, map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:" + deadPort(t) + "/postgres"},
		"--drop", keep)
	require.NotZero(t, code)
	require.Contains(t, stderr, "DATABASE_URL names the server")
	require.Contains(t, stderr, "cannot be reached to drop "+keep)
	require.Equal(t, keep, psql(t, server, "SELECT datname FROM pg_database WHERE datname = '"+keep+"'"))
}

// psql runs one statement on url and returns its unaligned output.
func psql(t *testing.T, url, sql string) string {
	t.Helper()
	bin, err := exec.LookPath("psql")
	if err != nil {
		m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
		require.NotEmpty(t, m, "psql")
		bin = m[len(m)-1]
	}
	out, err := exec.Command(bin, "-X", "-w", "-Atq", "-d", url, "-c", sql).CombinedOutput()
	require.NoError(t, err, "%s: %s", sql, out)
	return strings.TrimSpace(string(out))
}
