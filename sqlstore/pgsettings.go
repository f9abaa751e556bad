package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ServerSettingNames are the PostgreSQL settings Regina relies on or whose
// value changes its performance, as ServerSettings reads them and as
// NonDefaultSettings filters pg_settings.
var ServerSettingNames = []string{
	"autovacuum", "synchronous_commit", "fsync", "full_page_writes", "jit",
	"wal_compression", "max_wal_size", "shared_buffers", "max_connections",
}

// ServerSettings are the values of ServerSettingNames as one of the broker's
// connections sees them (server configuration, ALTER DATABASE/ROLE, the
// database URL; jit is the session's, which Regina sets off). Sizes are as
// SHOW displays them ("1GB").
type ServerSettings struct {
	Autovacuum        bool
	SynchronousCommit string
	Fsync             bool
	FullPageWrites    bool
	JIT               bool
	WALCompression    string
	MaxWALSize        string
	SharedBuffers     string
	MaxConnections    int
}

// SettingWarning is a server setting that works against Regina: the setting,
// its value and what it does to the broker.
type SettingWarning struct {
	Setting, Value, Message string
}

// Warnings lists the settings in s that work against Regina, for a broker
// whose pool holds up to poolSize connections. It changes nothing.
func (s ServerSettings) Warnings(poolSize int) []SettingWarning {
	var w []SettingWarning
	if !s.Autovacuum {
		w = append(w, SettingWarning{"autovacuum", "off", "autovacuum is off: Regina's tables are never vacuumed " +
			"or analyzed, and the dead row versions every push leaves in queen.partitions (a non-HOT update) " +
			"and those of pops, acks and retention are never cleaned unless VACUUM is run by hand"})
	}
	if s.SynchronousCommit == "off" {
		w = append(w, SettingWarning{"synchronous_commit", s.SynchronousCommit, "synchronous_commit is off: " +
			"acknowledged pushes and acks can be lost in a crash of the PostgreSQL server"})
	}
	if !s.Fsync {
		w = append(w, SettingWarning{"fsync", "off", "fsync is off: acknowledged messages can be lost, " +
			"and the database corrupted, in a crash of the operating system"})
	}
	if !s.FullPageWrites {
		w = append(w, SettingWarning{"full_page_writes", "off", "full_page_writes is off: a page torn by a " +
			"crash of the operating system cannot be recovered; messages can be lost or corrupted"})
	}
	if s.MaxConnections > 0 && s.MaxConnections < poolSize {
		w = append(w, SettingWarning{"max_connections", strconv.Itoa(s.MaxConnections), fmt.Sprintf(
			"max_connections (%d) is smaller than the broker's pool (DB_POOL_SIZE %d): the pool can never "+
				"fill, and connections past the server's limit fail", s.MaxConnections, poolSize)})
	}
	return w
}

// serverSettingsSQL reads ServerSettings in ServerSettingNames' order.
const serverSettingsSQL = `SELECT current_setting('autovacuum')::bool, current_setting('synchronous_commit'),
  current_setting('fsync')::bool, current_setting('full_page_writes')::bool, current_setting('jit')::bool,
  current_setting('wal_compression'), current_setting('max_wal_size'), current_setting('shared_buffers'),
  current_setting('max_connections')::int`

// ServerSettings reads the PostgreSQL settings Regina relies on through one
// of the pool's connections. It changes none of them.
func (s *Store) ServerSettings(ctx context.Context) (ServerSettings, error) {
	var v ServerSettings
	if err := s.pool.QueryRow(ctx, serverSettingsSQL).Scan(&v.Autovacuum, &v.SynchronousCommit, &v.Fsync,
		&v.FullPageWrites, &v.JIT, &v.WALCompression, &v.MaxWALSize, &v.SharedBuffers, &v.MaxConnections); err != nil {
		return ServerSettings{}, fmt.Errorf("read PostgreSQL settings: %w", classify(err))
	}
	return v, nil
}

// Setting is one PostgreSQL setting: its value as SHOW displays it and
// where it comes from (pg_settings.source, "configuration file").
type Setting struct {
	Name, Value, Source string
}

// String is "name=value (source)".
func (s Setting) String() string { return s.Name + "=" + s.Value + " (" + s.Source + ")" }

// NonDefaultSettings returns those of ServerSettingNames whose value, on the
// pool's connections, differs from PostgreSQL's built-in default (set by the
// configuration file, ALTER DATABASE/ROLE, the client...), by name. A setting
// the configuration file repeats at its default value is not listed.
func NonDefaultSettings(ctx context.Context, pool *pgxpool.Pool) ([]Setting, error) {
	rows, err := pool.Query(ctx, `SELECT name, current_setting(name), source FROM pg_settings
WHERE name = ANY($1) AND source <> 'default' AND setting IS DISTINCT FROM boot_val ORDER BY name`, ServerSettingNames)
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Setting, error) {
		var s Setting
		err := r.Scan(&s.Name, &s.Value, &s.Source)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	return out, nil
}

// SettingsText is settings as "a=x (source), b=y (source)".
func SettingsText(settings []Setting) string {
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = s.String()
	}
	return strings.Join(parts, ", ")
}
